"""The tiny training job the scenarios run on the local cluster, and what a user does with it:
the dataset, a batch file generated as a user would (hpc_imagenet.slurm.generate), submitting it, waiting for
its progress lines, releasing a requeued run at the right moment, and each run's final state."""
from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.data import demo
from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.commands import wait_for

REPO = Path(__file__).resolve().parents[4]  # the checkout the jobs run from
VENV = Path(sys.prefix)  # the venv this Python runs in: the jobs' trainers run in the same one
EPOCHS = 3
# The scenarios test the jobs' mechanics (signals, requeues, restarts, resumes), not a model: the
# smallest of torchvision's models that trains at 32 px, 1.4 M parameters. ResNet-18 (11.7 M) cost
# each trainer 2.9x the CPU beyond its imports (7.9 against 2.7 s for 3 epochs of 24 steps here),
# most of it in gradients, checkpoints (86 MB against 3 MB) and all-reduces that scale with the weights.
ARCH = "shufflenet_v2_x0_5"
TRAIN = ["--image-size", "32", "--val-steps", "1", "--dist-backend", "gloo", "--seed", "0", "-p", "1"]


def scenario_data(folder: Path) -> Path:
    """192 training images: 12 steps per epoch for 2 processes of batch 8."""
    return demo.generate(folder, classes=4, train_per_class=48, val_per_class=2, size=(40, 32))


def requeue_script(folder: Path, data: Path, launcher: str, nodes: int, procs: int, batch: int = 8) -> Path:
    """FOLDER/LAUNCHER.sh: the generated batch file of a 3-epoch ARCH run at 32 px on DATA, BATCH
    images per process."""
    argv = ["--name", f"requeue_{launcher}", "--nodes", str(nodes), "--gpus-per-node", "0",
            "--procs-per-node", str(procs), "--cpus-per-task", "1", "--launcher", launcher, "--time", "10",
            "--signal-seconds", "60", "--venv", str(VENV), "--data", str(data), "--arch", ARCH,
            "--epochs", str(EPOCHS), "--batch-size", str(batch), "--workers", "0",
            "--output", str(folder / "%x-%j.out"),
            "--", *TRAIN]
    path = folder / f"{launcher}.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def submit_script(cluster: SlurmCluster, script: Path, run_dir: Path, *export: str,
                  sbatch_args: Sequence[str] = ()) -> Tuple[str, Callable[[], str]]:
    """sbatch as a user would, with the tiny-run overrides; (job id, the batch log's text so far).
    ``sbatch_args``: more sbatch options, e.g. ``--nodelist`` to keep concurrent faults apart."""
    settings = ["ALL", f"LOG_DIR={run_dir}", "OMP_NUM_THREADS=1", "OMPI_ALLOW_RUN_AS_ROOT=1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", *export]  # mpirun refuses root without the last two
    job_id = client.submit(script, [*sbatch_args, "--export", ",".join(settings)], cwd=REPO, env=cluster.env)
    log_path = script.parent / f"requeue_{script.stem}-{job_id}.out"  # --output %x-%j.out
    return job_id, lambda: log_path.read_text() if log_path.exists() else ""


def wait_for_progress(log: Callable[[], str], epoch: int, step: int, timeout: float = 180) -> None:
    pattern = re.compile(rf"Epoch: \[{epoch}\]\[\s*{step}/")
    wait_for(f"training to reach epoch {epoch} step {step}", lambda: pattern.search(log()), timeout, interval=0.3)


def release_requeued(cluster: SlurmCluster, job_id: str, *update: str) -> None:
    """SLURM holds a requeued job for ~2 minutes (BeginTime); start it now instead, but only once
    what that hold protects is true:

    - the first run is fully gone: accounted as REQUEUED, no node still completing it;
    - the next run's job credential will be created in a later second than the revocation of the
      first run's. At the requeue each slurmd revokes the job's credential at the kill request's
      time (the run's End, or End + 1 when the kill crossed a second boundary) and refuses any
      credential of the job created no later than that, in whole seconds. A run started in the
      same second dies at launch (slurmd: "Job N already killed, do not launch batch job";
      slurmctld: "Killing non-startable batch JobId=N: Job credential revoked"): a zero-length
      FAILED run, exit 1:0. A self-requeue from the batch script, after the training has exited,
      is over in milliseconds, so an immediate release usually lands in that very second.
    """
    def first_run_end() -> Optional[float]:
        state = cluster.job_state(job_id)
        if state.get("JobState") != "PENDING" or state.get("Restarts", "0") == "0":
            return None
        if cluster.run(["sinfo", "-h", "-t", "completing", "-o", "%N"], check=False).stdout.strip():
            return None
        rows = [row for row in cluster.sacct(job_id) if row["JobID"] == job_id]
        if not rows or rows[0]["State"].split()[0] != "REQUEUED" or not rows[0]["End"][:1].isdigit():
            return None
        return datetime.fromisoformat(rows[0]["End"]).timestamp()  # local time, as sacct prints it

    end = wait_for(f"job {job_id} to be requeued", first_run_end, 90, interval=0.5)
    wait_for(f"the second after job {job_id}'s credential was revoked",
             lambda: time.time() >= end + 2, 5, interval=0.05)
    if update:  # e.g. NumNodes=2: what the requeued run gets
        cluster.run(["scontrol", "update", f"JobId={job_id}", *update])
    cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])


def run_states(cluster: SlurmCluster, job_id: str) -> List[str]:
    """The final state of each run of JOB, oldest first (REQUEUED, COMPLETED...)."""
    return [row["State"].split()[0] for row in cluster.sacct(job_id) if row["JobID"] == job_id]


def stand_in_trainer(folder: Path, text: str) -> Path:
    """An executable shell script the batch file runs as its PYTHON (a trainer's exit, without one)."""
    path = folder / "stand_in_trainer.sh"
    path.write_text(text)
    path.chmod(0o755)
    return path
