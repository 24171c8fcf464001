"""Your own script in a container image with its data staged: the data-path example (launch/examples/
train_images.py) under Charliecloud's ch-run on 2 nodes of the test cluster, DATA staged into each node's $TMPDIR
by the batch file's staging step, run in the image as the training is, and read there by the script from the
image's paths (/mnt/1 staged to /tmp, the run folder at /mnt/2) that the batch file tells it. Mid-run the batch
script gets the time-limit signal: the script checkpoints, the job requeues from the host (no scontrol in the
image), the second run reuses the copies and resumes at the exact batch.

The image is the test cluster's light one (hpc_imagenet/slurm/localcluster/image.py: Debian's Python, the venv's
packages on PYTHONPATH). The nodes share this machine's disk, so the job's TMPDIR is one folder of this test."""
from __future__ import annotations

from pathlib import Path

import pytest

from hpc_imagenet.imagenet.data.staging import MARKER
from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import submit_script
from tests.cluster.requeue import assert_traced_once, signal_in_mid_run
from tests.helpers import REPO, container_exports

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "launch" / "examples" / "train_images.py"
EPOCHS, STEPS_PER_EPOCH = 3, 12  # 192 images, 2 ranks of batch 8


def _batch_file(folder: Path, data: Path, image: Path) -> Path:
    argv = ["--script", str(SCRIPT), "--name", "requeue_own_container", "--nodes", "2", "--gpus-per-node", "0",
            "--procs-per-node", "1", "--cpus-per-task", "1", "--launcher", "torchrun", "--time", "10",
            "--signal-seconds", "60", "--data", str(data), "--stage-dir", "$TMPDIR", "--output",
            str(folder / "%x-%j.out"), "--container", str(image), "--container-runtime", "charliecloud", "--",
            "--arch", "resnet18", "--image-size", "32", "--batch-size", "8", "--workers", "0", "--epochs",
            str(EPOCHS), "--print-every", "1", "--trace", "/mnt/2/trace.txt"]  # the run folder, as the image sees it
    path = folder / "own_container.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def test_a_script_in_an_image_reads_its_staged_copy_and_resumes_at_the_exact_batch(
        slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, container_image: Path) -> None:
    node_tmp, run_dir = tmp_path / "node-tmp", tmp_path / "run"
    node_tmp.mkdir()
    script = _batch_file(tmp_path, data, container_image)
    job_id, log = submit_script(slurm_cluster, script, run_dir, *container_exports(container_image),
                                f"TMPDIR={node_tmp}")
    text = signal_in_mid_run(slurm_cluster, job_id, log, "step 4/")
    assert "ch-run" in script.read_text() and "the script stopped at the stop request" in text, text[-3000:]
    (copy,) = [path.parent for path in node_tmp.glob(f"*/*/{MARKER}")]  # the image's /tmp is the job's TMPDIR
    assert text.count(f"reading /tmp/{copy.parent.name}/{copy.name};") == 2, text[-3000:]  # both runs, in the image
    assert text.count("reusing the complete staged copy") >= 2, text[-3000:]  # the second run, each node
    assert_traced_once(run_dir / "trace.txt", 2, EPOCHS * STEPS_PER_EPOCH, 4)
    assert "resumed at step" in text and f"epoch {EPOCHS}/{EPOCHS} val top1" in text, text[-3000:]
