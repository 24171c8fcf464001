"""A generated batch file that trains inside a container image, for real: Charliecloud's ch-run on the test
cluster's nodes (2 in make test, 4 in make test-long), torchrun started in the image on each, gloo over the
nodes' network.

The image is Debian's minimal root filesystem with Python, built here without a registry and cached
(hpc_imagenet/slurm/localcluster/image.py); the checkout and the data are bind-mounted by the batch file's own
``--container-mounts``, and the venv's packages come in on ``PYTHONPATH``. Mid-run the batch script gets
the time-limit signal (USR2, as ``--signal=B:USR2@T`` sends it): the trainers in the image checkpoint, the job
requeues, and the second run resumes at the exact step and trains to its end, every step once.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, TRAIN, release_requeued, run_states,
                                                            submit_script, wait_for_progress)
from tests.cluster.requeue import assert_resumed_exactly
from tests.helpers import container_exports

pytestmark = pytest.mark.slurm


def _image_python(image: Path) -> str:
    done = subprocess.run(["ch-run", str(image), "--", "python3", "-c", "import platform; "
                           "print(platform.python_version())"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "USER": os.environ.get("USER", "root")})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _container_script(folder: Path, data: Path, image: Path, nodes: int) -> Path:
    """The generated torchrun file for NODES nodes, run in IMAGE by Charliecloud, as a user would generate it."""
    argv = ["--name", "requeue_container", "--nodes", str(nodes), "--gpus-per-node", "0", "--procs-per-node", "1",
            "--cpus-per-task", "1", "--launcher", "torchrun", "--time", "10", "--signal-seconds", "60",
            "--data", str(data), "--arch", ARCH, "--epochs", str(EPOCHS), "--batch-size", "8", "--workers", "0",
            "--output", str(folder / "%x-%j.out"), "--container", str(image), "--container-runtime",
            "charliecloud", "--", *TRAIN]
    path = folder / "container.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


@pytest.mark.parametrize("nodes", [2, 4], ids=lambda nodes: f"{nodes}nodes")
def test_charliecloud_job_is_preempted_requeued_and_resumes_exactly(slurm_cluster: SlurmCluster, data: Path,
                                                                    tmp_path: Path, container_image: Path,
                                                                    nodes: int):
    image = container_image
    script = _container_script(tmp_path, data, image, nodes)
    assert "ch-run" in script.read_text()
    job_id, log = submit_script(slurm_cluster, script, tmp_path / "run", *container_exports(image))
    wait_for_progress(log, 1, 2, timeout=300)
    slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job_id])
    release_requeued(slurm_cluster, job_id)
    row = slurm_cluster.wait_finished(job_id, timeout=300, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(slurm_cluster, job_id) == ["REQUEUED", "COMPLETED"]
    assert "USR2: asking the training processes to checkpoint" in log() and "requeueing job" in log()
    assert_resumed_exactly(tmp_path / "run", log())
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    # the trainers ran in the image: its Python, on every node
    assert record["environment"]["python"] == _image_python(image)
    assert record["dist"]["world_size"] == nodes and record["dist"]["nodes"] == nodes
    evidence = [line for line in log().splitlines() if any(word in line for word in EVIDENCE)]
    print("\n".join(evidence))  # what happened, in the test's output (pytest -rP shows it)


EVIDENCE = ("ch-run", "USR2", "checkpoint saved", "requeueing job", "resumed from", "done (finished)")
