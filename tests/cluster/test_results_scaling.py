"""``python -m hpc_imagenet.harness.bench scaling`` on the test cluster, typed as a user would type it on a login
node: the command runs as a subprocess whose only link to the cluster is SLURM_CONF (and the SLURM
client binaries on PATH). Records, resume, a failed point, Ctrl-C, the storage (--io) sweep, and a sweep of a
user's own script (--script) with its report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.runners import script_points
from hpc_imagenet.slurm.localcluster import SlurmCluster, wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--gpus-per-node", "0", "--cpus-per-task", "1", "-a", ARCH, "--image-size", "32", "--batch", "8",
         "--time", "00:05:00", "--no-report"]


def command(records_file: Path, *args: str) -> List[str]:
    return [sys.executable, "-m", "hpc_imagenet.harness.bench", "scaling", *args, *SMALL, "--records",
            str(records_file),
            "--tag", "t"]


def user_env(cluster: SlurmCluster) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "SLURM_CONF": cluster.env["SLURM_CONF"], "PATH": cluster.env["PATH"], "PYTHONPATH": str(REPO)}


def run(cluster: SlurmCluster, cmd: List[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=user_env(cluster), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def read(path: Path) -> List[dict]:
    good, bad = records.load([path])
    assert not bad, bad
    return good


def test_sweep_records_each_point_then_resumes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    cmd = command(out, "--nodes", "1", "2", "--steps-per-epoch", "7")
    first = run(slurm_cluster, cmd)
    assert first.returncode == 0, first.stderr[-3000:]
    recs = read(out)
    assert [(r["status"], r["point"]["nodes"]) for r in recs] == [("ok", 1), ("ok", 2)], [r["error"] for r in recs]
    assert len({r["sweep"] for r in recs}) == 1 and recs[0]["sweep"].startswith("t-train-")
    for rec, nodes in zip(recs, (1, 2)):
        m, env = rec["metrics"], rec["environment"]
        assert m["world_size"] == nodes == m["nodes"] == env["nodes"] and m["images_per_s"] > 0
        assert env["hostname"].startswith("node") and env["slurm_job_id"]
        assert f"job {env['slurm_job_id']} done" in first.stderr  # progress names each job
        # the record names no path of this machine; the kept folder is under the sweep's runs folder
        assert not Path(rec["run_dir"]).is_absolute() and str(tmp_path) not in json.dumps(rec)
        (kept,) = [d for d in (tmp_path / "runs").glob("*/*") if d.name == Path(rec["run_dir"]).name]
        assert sorted(f.name.split(".")[0] for f in kept.iterdir()) == ["events", "run"]
        assert str(tmp_path) not in (kept / "run.json").read_text()  # no machine paths in what is kept
    assert "queued" in first.stderr and "running" in first.stderr

    again = run(slurm_cluster, cmd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already recorded" in again.stderr and "submitted" not in again.stderr
    assert len(read(out)) == 2


def submitted(proc: subprocess.Popen, count: int) -> List[str]:
    """Job ids from the command's progress lines, once ``count`` jobs are submitted."""
    lines, jobs = [], []
    for line in proc.stderr:
        lines.append(line)
        jobs += [line.split("submitted job ")[1].split()[0]] if "submitted job" in line else []
        if len(jobs) == count:
            return jobs
    raise AssertionError("".join(lines))


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen(command(out, "--nodes", "1", "2", "--steps-per-epoch", "5"), env=user_env(slurm_cluster),
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    jobs = submitted(proc, 2)
    slurm_cluster.run(["scancel", jobs[1]])  # the 2-node job dies before it trains (an admin, a node failure)
    rest = proc.communicate(timeout=600)[1]
    assert proc.returncode == 0, rest[-3000:]  # one point of two failed: the sweep itself did not
    recs = {r["point"]["nodes"]: r for r in read(out)}
    assert recs[1]["status"] == "ok", recs[1]["error"]
    assert recs[2]["status"] == "failed" and "run.json" in recs[2]["error"], recs[2]["error"]
    assert recs[1]["sweep"] == recs[2]["sweep"] and "FAILED" in rest


def test_ctrl_c_cancels_every_job_it_submitted(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    # SIGINT as a terminal sends it: a pytest started in the background (`cmd &` without job control)
    # ignores SIGINT, its children inherit that, and Python then never raises KeyboardInterrupt.
    # faulthandler: if it has not exited in time, SIGABRT makes it print where it is stuck.
    proc = subprocess.Popen(command(out, "--nodes", "1", "2", "4", "--steps-per-epoch", "100000"),
                            env={**user_env(slurm_cluster), "PYTHONFAULTHANDLER": "1"}, cwd=REPO,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    jobs = submitted(proc, 3)
    for line in proc.stderr:  # the first job running: the other two are queued behind it
        if " running" in line:
            break
    proc.send_signal(signal.SIGINT)
    try:
        rest = proc.communicate(timeout=180)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        pytest.fail("no exit 180 s after Ctrl-C; where it was:\n" + proc.communicate()[1][-4000:])
    assert proc.returncode == 130, rest[-3000:]
    assert "cancelled" in rest
    # squeue ends empty: none of the sweep's jobs stays queued or running
    wait_for("the sweep's jobs to leave the queue", lambda: not set(jobs) & set(
        slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split()), 120)
    states = {j: slurm_cluster.wait_finished(j)["State"] for j in jobs}  # accounting: cancelled, not finished
    assert all(s.startswith("CANCELLED") for s in states.values()), states
    assert not out.exists() or read(out) == []  # nothing was measured, nothing recorded


def test_io_sweep_reads_every_file_once_per_point(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    sizes = {}
    for c in range(3):
        (data / "train" / f"c{c}").mkdir(parents=True)
        for i in range(10):
            f = data / "train" / f"c{c}" / f"{i}.JPEG"
            f.write_bytes(os.urandom(1000 + 97 * i))
            sizes[f] = f.stat().st_size
    out = tmp_path / "r.jsonl"
    done = run(slurm_cluster, command(out, "--io", "--data", str(data), "--nodes", "1", "2", "--readers", "1", "3"))
    assert done.returncode == 0, done.stderr[-3000:]
    recs = read(out)
    points = sorted((r["point"]["nodes"], r["point"]["readers_per_node"]) for r in recs)
    assert points == [(1, 1), (1, 3), (2, 1), (2, 3)]
    for r in recs:
        m, p = r["metrics"], r["point"]
        assert r["status"] == "ok" and r["kind"] == "storage", r["error"]
        assert p["format"] == "imagefolder" and m["complete"]
        assert m["bytes"] == sum(sizes.values()) and m["files"] == len(sizes)  # every file once, whole
        assert m["readers"] == p["nodes"] * p["readers_per_node"] and m["nodes"] == p["nodes"]
        assert m["mb_per_s"] == pytest.approx(m["bytes"] / m["elapsed_s"] / 1e6)
        assert m["mb_per_s_per_node"] == pytest.approx(m["mb_per_s"] / p["nodes"])
    assert json.dumps(recs).count(str(tmp_path)) == 0  # the data path is recorded without this machine's path


def test_a_users_own_script_is_swept_recorded_from_its_steps_and_reported(slurm_cluster: SlurmCluster,
                                                                        tmp_path: Path) -> None:
    """--script: the plain DDP example at 1, 2 and 4 nodes, its steps timed through
    hpc_imagenet.requeue.step_done, each point a train record from the node it ran on, then the cluster report."""
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "hpc_imagenet.harness.bench", "scaling", "--script", "launch/examples/train_ddp.py",
           "--script-args", "--steps 30 --batch-size 16", "--nodes", "1", "2", "4", "--gpus-per-node", "0",
           "--procs-per-node", "1", "--cpus-per-task", "1", "--time", "00:05:00", "--no-report", "--records",
           str(out), "--tag", "t"]
    proc = run(slurm_cluster, cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = read(out)
    assert [(r["status"], r["point"]["nodes"], r["point"]["variant"]) for r in recs] == [
        ("ok", 1, "script"), ("ok", 2, "script"), ("ok", 4, "script")], [r["error"] for r in recs]
    for rec, nodes in zip(recs, (1, 2, 4)):
        m, env = rec["metrics"], rec["environment"]
        assert m["world_size"] == nodes and m["global_batch"] == 16 * nodes and m["images_per_s"] > 0
        assert m["measured_steps"] == 30 - script_points.WARMUP_STEPS - 1
        assert env["hostname"].startswith("node") and env["slurm_job_id"] and env["nodes"] == nodes
        assert str(tmp_path) not in json.dumps(rec)
    report = subprocess.run([sys.executable, "-m", "hpc_imagenet.harness.report", "--records", str(out), "--tag", "t",
                             "--out", str(tmp_path / "out"), "--quiet-share", "1"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "out" / "reports" / "t" / "README.md").read_text()
    assert "your script train_ddp.py (--framework=plain --steps 30 --batch-size 16), batch 16/process" in text
    assert "Scaling efficiency at the largest scale" in text and "at 4 process(es)" in text
