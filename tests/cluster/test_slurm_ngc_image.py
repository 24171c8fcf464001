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

from hpc_imagenet.imagenet.data.staging import MARKER
from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster import image as test_image
from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, TRAIN, release_requeued, run_states,
                                                            submit_script, wait_for_progress)
from tests.cluster.requeue import IMAGE_TIER, assert_resumed_exactly, assert_traced_once, signal_in_mid_run
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
    assert next(site.glob("lightning-2.*.dist-info"))  # what a user's own image adds for a Lightning script


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


LIGHTNING_SCRIPT = REPO / "launch" / "examples" / "train_lightning_images.py"
LIGHTNING_EPOCHS, LIGHTNING_STEPS_PER_EPOCH = 3, 12  # the cluster's dataset: 192 images, 2 ranks of batch 8


def _lightning_batch_file(folder: Path, data: Path, image: Path) -> Path:
    # the script's path from the checkout, the folder the job runs in: the image sees the checkout at /mnt/0 only
    argv = ["--script", str(LIGHTNING_SCRIPT.relative_to(REPO)), "--framework", "lightning", "--name",
            "requeue_ngc_lightning", "--nodes", "2", "--gpus-per-node", "0", "--procs-per-node", "1",
            "--cpus-per-task", "1", "--launcher", "torchrun", "--time", "10", "--signal-seconds", "60",
            "--data", str(data), "--stage-dir", "$TMPDIR", "--output", str(folder / "%x-%j.out"),
            "--container", str(image), "--container-runtime", "charliecloud",
            "--", "--image-size", "32", "--batch-size", "8", "--workers", "0", "--epochs", str(LIGHTNING_EPOCHS),
            "--print-every", "1", "--trace", "/mnt/2/trace.txt"]  # the run folder, as the image sees it
    path = folder / "ngc_lightning.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def test_a_lightning_script_in_the_ngc_like_image_reads_its_staged_copy_and_resumes_at_the_exact_step(
        slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, torch_image: Path):
    """The Lightning course's kind of script (launch/examples/train_lightning_images.py: the requeue callback, the
    engine's data module) in the image's own Python with the Lightning a user's image adds, on 2 nodes under
    torchrun; DATA staged into each node's TMPDIR (the image's /tmp) by the batch file; the time-limit signal in
    mid-epoch; requeued from the host (the image has no scontrol); resumed at the exact step."""
    node_tmp, run_dir = tmp_path / "node-tmp", tmp_path / "run"
    node_tmp.mkdir()
    script = _lightning_batch_file(tmp_path, data, torch_image)
    job_id, log = submit_script(slurm_cluster, script, run_dir, f"CONTAINER_IMAGE={torch_image}",
                                f"TMPDIR={node_tmp}")
    text = signal_in_mid_run(slurm_cluster, job_id, log, "step 4/", timeout=600)
    assert "the script stopped at the stop request" in text, text[-3000:]
    assert not (torch_image / "usr" / "bin" / "scontrol").exists()
    (copy,) = [path.parent for path in node_tmp.glob(f"*/*/{MARKER}")]  # the image's /tmp is the job's TMPDIR
    assert text.count(f"reading /tmp/{copy.parent.name}/{copy.name}\n") == 2, text[-3000:]  # both runs, inside
    assert text.count("reusing the complete staged copy") >= 2, text[-3000:]  # the second run, each node
    assert_traced_once(run_dir / "trace.txt", 2, LIGHTNING_EPOCHS * LIGHTNING_STEPS_PER_EPOCH, 4)
    assert f"epoch {LIGHTNING_EPOCHS}/{LIGHTNING_EPOCHS} val top1" in text, text[-3000:]
    print("\n".join(line for line in text.splitlines() if any(word in line for word in (*EVIDENCE, "staged"))))
