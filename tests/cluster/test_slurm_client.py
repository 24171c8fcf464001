"""hpc_imagenet.slurm.client on the test cluster: a batch file and a script's text submitted, their states from squeue
then sacct, a wait that reports each change, a cancel (an unknown or purged job id is no error), and a
cancel that slurmctld does not answer gives up and names the jobs instead of hanging a Ctrl-C."""
import os
import signal
from pathlib import Path

import pytest

from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.localcluster import SlurmCluster

pytestmark = pytest.mark.slurm


def test_submit_wait_and_final_state(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    env = slurm_cluster.env
    script = tmp_path / "ok.sh"
    script.write_text("#!/bin/sh\necho from-a-file\n")
    ok = client.submit(script, ["--output", str(tmp_path / "slurm-%j.out")], cwd=tmp_path, env=env)
    bad = client.submit(options=["--output", str(tmp_path / "bad-%j.out")], text="#!/bin/sh\nexit 3\n",
                        cwd=tmp_path, env=env)
    seen = []
    client.wait([ok, bad], lambda job, now: seen.append((job, now)), timeout_s=120, poll_s=0.5, env=env)
    assert (ok, client.DONE) in seen and (bad, client.DONE) in seen, seen
    assert "from-a-file" in client.job_output(tmp_path)
    assert slurm_cluster.wait_finished(ok)["State"] == "COMPLETED"  # accounting has caught up
    slurm_cluster.wait_finished(bad)
    assert client.state(ok, env) == "COMPLETED" and client.state(bad, env) == "FAILED"


def test_cancel_and_unknown_jobs(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    env = slurm_cluster.env
    job = client.submit(options=["--output", str(tmp_path / "slurm-%j.out"), "--begin=now+1hour"],
                        text="#!/bin/sh\nsleep 600\n", cwd=tmp_path, env=env)
    assert client.states([job], env)[job].startswith("queued (BeginTime)")
    assert client.in_queue(job, env)
    client.cancel([job, "987654"], env=env)  # a job id slurmctld never knew is ignored
    slurm_cluster.wait_finished(job)
    assert client.state(job, env).startswith("CANCELLED")
    assert client.state("987654", env) == client.DONE  # neither squeue nor sacct knows it: no "Invalid job id"


def test_a_refused_submission_is_one_line(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    with pytest.raises(client.SlurmError, match=r"^sbatch --parsable failed: .*submission failed") as e:
        client.submit(options=["--partition=no-such-partition"], text="#!/bin/sh\ntrue\n", cwd=tmp_path,
                      env=slurm_cluster.env)
    assert "\n" not in str(e.value)


def test_ctrl_c_with_slurmctld_not_answering_names_the_jobs_instead_of_hanging(
        slurm_cluster: SlurmCluster, caplog) -> None:
    """A stopped (SIGSTOP) slurmctld: scancel blocks, so cancel gives up after its timeout and tells
    the user which jobs to cancel, instead of hanging the harness's Ctrl-C."""
    pid = int((slurm_cluster.layout.base / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        client.cancel(["987654", "987655"], timeout_s=3, env=slurm_cluster.env)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "cancel the jobs yourself: scancel 987654 987655" in caplog.text
    assert "cancelled SLURM job" not in caplog.text
