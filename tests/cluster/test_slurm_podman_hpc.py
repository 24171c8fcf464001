"""The generated Podman-HPC file trains in the NGC-like image on the test cluster's 4 nodes: Debian's podman with
runc, PyPI's podman-hpc, the image (hpc_imagenet/slurm/localcluster/image.py, ``ensure_torch``: its own Python with
torch 2.6,
nothing of the host's) imported into podman with its own variables and migrated with ``podman-hpc migrate``
(hpc_imagenet/slurm/localcluster/podman.py). The file checks that the node sees the image (``podman-hpc images``),
mounts
only the checkout, the data and the run folder at their host paths, and runs torchrun in the image with
``--net host``. Mid-run the batch script gets USR2, the trainers checkpoint, the job requeues and resumes at the
exact step.

What differs from a real cluster: the SLURM "nodes" are network namespaces of one host
(hpc_imagenet/slurm/localcluster/network.py), so podman, started by each node's srun task, joins that node's namespace
with
``--net host``; but podman's storage (the squashed store that ``SQUASH_DIR`` names, as a shared filesystem
would hold it, and the node store, which a real node keeps on its own local disk) is one folder shared by all
four. The site's settings (the containers.conf with runc and ulimits, podman-hpc's configuration, its venv on
PATH) come from the submitter's environment rather than from /etc or a module.

Like the Charliecloud test beside it, this tier runs where HPC_IMAGENET_TORCH_IMAGE=1 is set (``make
test-images``); the first import and migration of the ~6 GB image take a few minutes, later runs reuse them.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster import image as test_image
from hpc_imagenet.slurm.localcluster import podman
from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, TRAIN, release_requeued, run_states,
                                                            submit_script, wait_for_progress)
from tests.cluster.requeue import IMAGE_TIER, assert_resumed_exactly
from tests.helpers import REPO

pytestmark = IMAGE_TIER
EVIDENCE = ("podman-hpc", "USR2", "checkpoint saved", "requeueing job", "resumed from", "done (finished)")


@pytest.fixture(scope="module")
def site() -> podman.PodmanHpc:
    try:
        return podman.ensure(test_image.ensure_torch(REPO))
    except ClusterError as exc:
        pytest.fail(f"podman-hpc or the NGC-like image could not be set up: {exc}")


def _script(folder: Path, data: Path, site: podman.PodmanHpc) -> Path:
    argv = ["--name", "requeue_podman_hpc", "--nodes", "4", "--gpus-per-node", "0", "--procs-per-node", "1",
            "--cpus-per-task", "1", "--launcher", "torchrun", "--time", "10", "--signal-seconds", "60",
            "--data", str(data), "--arch", ARCH, "--epochs", str(EPOCHS), "--batch-size", "8", "--workers", "0",
            "--output", str(folder / "%x-%j.out"), "--container", site.image, "--container-runtime", "podman-hpc",
            "--container-mounts", str(data), "--container-mounts", str(folder), "--", *TRAIN]
    path = folder / "podman_hpc.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def _podman_hpc(site: podman.PodmanHpc, *args: str) -> str:
    return subprocess.run(["podman-hpc", *args], capture_output=True, text=True, check=True, timeout=120,
                          env=site.command_env()).stdout


def test_the_nodes_see_the_image_only_migrated_with_its_own_variables(site: podman.PodmanHpc):
    # the node store has nothing of its own: the image comes from the squashed store, read-only
    listed = _podman_hpc(site, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ReadOnly}}").split("\n")
    assert f"{site.image} true" in listed and f"{site.image} false" not in listed, listed
    # a container of it, as a node starts one (podman-hpc adds the squashed store to run's options only)
    variables = _podman_hpc(site, "run", "--rm", site.image, "env").split()
    assert any(v.startswith("PATH=/opt/pytorch/bin:") for v in variables) and "PYTORCH_VERSION=2.6.0" in variables


def test_podman_hpc_trains_in_the_ngc_like_image_on_4_nodes_preempted_and_resumed_exactly(
        slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, site: podman.PodmanHpc, monkeypatch):
    monkeypatch.setenv("PATH", site.env()["PATH"])  # the generator checks that podman-hpc is on this node
    script = _script(tmp_path, data, site)
    settings = [f"{name}={value}" for name, value in site.env().items()]
    job_id, log = submit_script(slurm_cluster, script, tmp_path / "run", *settings)
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
