"""The generated Charliecloud file trains in an image like NVIDIA's NGC PyTorch one, on the test cluster's 4
nodes: the image's own Python with torch 2.6 (the bottom of the supported window) and the project's
dependencies inside it, read-only, none of the host's folders in it, variables of its own
(hpc_imagenet/slurm/localcluster/image.py, ``ensure_torch``). Nothing of the host's venv is mounted or put on a path:
the
file binds the checkout, the data and the run folder onto the image's own mount points. Mid-run the batch
script gets USR2, the trainers checkpoint, the job requeues and resumes at the exact step.

The image is ~5 GB (PyTorch's CUDA wheels) and takes minutes to build the first time, so this tier runs where
HPC_IMAGENET_TORCH_IMAGE=1 is set (``make test-images``, which .ci/run runs); elsewhere it skips.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster import image as test_image
from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, TRAIN, release_requeued, run_states,
                                                            submit_script, wait_for_progress)
from tests.cluster.requeue import IMAGE_TIER, assert_resumed_exactly
from tests.helpers import REPO

pytestmark = IMAGE_TIER
EVIDENCE = ("ch-run", "USR2", "checkpoint saved", "requeueing job", "resumed from", "done (finished)")


@pytest.fixture(scope="module")
def torch_image() -> Path:
    try:
        return test_image.ensure_torch(REPO)
    except ClusterError as exc:
        pytest.fail(f"the NGC-like image could not be built: {exc}")


def _script(folder: Path, data: Path, image: Path) -> Path:
    argv = ["--name", "requeue_ngc_like", "--nodes", "4", "--gpus-per-node", "0", "--procs-per-node", "1",
            "--cpus-per-task", "1", "--launcher", "torchrun", "--time", "10", "--signal-seconds", "60",
            "--data", str(data), "--arch", ARCH, "--epochs", str(EPOCHS), "--batch-size", "8", "--workers", "0",
            "--output", str(folder / "%x-%j.out"), "--container", str(image), "--container-runtime",
            "charliecloud", "--", *TRAIN]
    path = folder / "ngc_like.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def test_the_image_has_its_own_python_and_nothing_of_the_host(torch_image: Path):
    environment = (torch_image / "ch" / "environment").read_text()
    assert "PATH=/opt/pytorch/bin:" in environment and "PYTORCH_VERSION=2.6.0" in environment
    assert not (torch_image / str(REPO).lstrip("/")).exists()  # no folder made for the checkout
    assert sorted(p.name for p in (torch_image / "mnt").iterdir()) == [str(n) for n in range(10)]
    site = next((torch_image / "opt" / "pytorch" / "lib").glob("python3.*/site-packages"))
    assert next(site.glob("torch-2.6.0*.dist-info")) and next(site.glob("torchvision-0.21.0*.dist-info"))


def test_charliecloud_trains_in_the_ngc_like_image_on_4_nodes_preempted_and_resumed_exactly(
        slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, torch_image: Path):
    script = _script(tmp_path, data, torch_image)
    # the job's settings: the image and the run folder, nothing of the host's Python (PYTHON stays "python",
    # which the image's PATH finds)
    job_id, log = submit_script(slurm_cluster, script, tmp_path / "run", f"CONTAINER_IMAGE={torch_image}")
    wait_for_progress(log, 1, 2, timeout=600)
    slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job_id])
    release_requeued(slurm_cluster, job_id)
    row = slurm_cluster.wait_finished(job_id, timeout=600, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(slurm_cluster, job_id) == ["REQUEUED", "COMPLETED"]
    assert_resumed_exactly(tmp_path / "run", log())
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["environment"]["torch"].startswith("2.6.0"), record["environment"]["torch"]
    assert record["dist"]["world_size"] == 4 and record["dist"]["nodes"] == 4
    print("\n".join(line for line in log().splitlines() if any(word in line for word in EVIDENCE)))
