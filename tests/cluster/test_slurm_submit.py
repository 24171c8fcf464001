"""hpc_imagenet.slurm.submit on the test cluster: submitit jobs on 1 and 2 nodes return the trainer's summary,
a failing job reports its failure, and --sweep submits one job per point."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_imagenet.slurm import submit as sm
from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
TINY = ("-a", ARCH, "--image-size", "32", "-b", "8", "--epochs", "2", "--steps-per-epoch", "3",
        "--val-steps", "2", "--workers", "0", "--dist-backend", "gloo", "--seed", "0")


def _submission(tmp_path: Path, data: Path, **kw) -> sm.Submission:
    kw = {"procs_per_node": 1, "cluster": "slurm", **kw}
    return sm.Submission(train_args=(*TINY, str(data)), cpus_per_task=1, time_min=10,
                         folder=str(tmp_path / "submitit" / "%j"), log_dir=str(tmp_path / "run"), **kw)


def test_two_node_submission_returns_the_result(on_cluster: SlurmCluster, jpeg_data, tmp_path: Path) -> None:
    job = sm.submit(_submission(tmp_path, jpeg_data, nodes=2))
    assert job.job_id.isdigit() and Path(job.paths.stdout).parent.parent == tmp_path / "submitit"
    summary = sm.result(job)
    assert summary["status"] == "finished" and summary["rank"] == 0
    assert summary["dist"]["world_size"] == 2 and summary["dist"]["nodes"] == 2
    assert summary["dist"]["environment"] == "slurm"
    assert [t["rank"] for t in job.results()] == [0, 1]
    assert on_cluster.wait_finished(job.job_id)["State"] == "COMPLETED"


def test_failing_submission_reports_the_failure(on_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = sm.submit(_submission(tmp_path, tmp_path / "no-such-dataset"))
    with pytest.raises(Exception) as err:
        sm.result(job)
    assert "training exited with status 2" in str(err.value)
    assert on_cluster.wait_finished(job.job_id)["State"] == "FAILED"


def test_bad_submission_is_one_line() -> None:
    with pytest.raises(sm.SubmitError, match="unknown variant 'fsdp'"):
        sm.submit(sm.Submission(variant="fsdp"))
    with pytest.raises(sm.SubmitError, match="cannot sweep 'lr'"):
        sm.sweep_points(sm.Submission(), {"lr": ["0.1"]})


def test_cli_sweep_submits_one_job_per_point(on_cluster: SlurmCluster, jpeg_data, tmp_path: Path) -> None:
    """--sweep nodes=1,2 --wait: a single-node and a 2-node job, each with its own run folder."""
    cmd = [sys.executable, "-m", "hpc_imagenet.slurm.submit", "--sweep", "nodes=1,2", "--wait", "--procs-per-node", "1",
           "--cpus-per-task", "1", "--time-min", "10", "--cluster", "slurm", "--name", "sweep",
           "--folder", str(tmp_path / "submitit" / "%j"), "--log-dir", str(tmp_path / "runs"),
           "--", *TINY, str(jpeg_data)]
    proc = subprocess.run(cmd, cwd=REPO, env=on_cluster.env | {"OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("submitted job") == 2
    for nodes in (1, 2):
        record = json.loads((tmp_path / "runs" / f"nodes{nodes}" / "run.json").read_text())
        assert record["status"] == "finished" and record["dist"]["nodes"] == nodes


def test_local_submission_without_slurm(jpeg_data, tmp_path: Path) -> None:
    """Where there is no SLURM, the same submission runs on this machine (2 local DDP processes)."""
    job = sm.submit(_submission(tmp_path, jpeg_data, cluster="local", procs_per_node=2))
    summary = sm.result(job)
    assert summary["status"] == "finished"
    assert summary["dist"]["world_size"] == 2 and summary["dist"]["environment"] == "torchrun"
