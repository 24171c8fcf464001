"""``hpc_imagenet.harness.bench train --submit slurm`` on the test cluster: a 1- and a 2-node gloo point become
valid records with the job's environment (nodes, rank-0 host, job id) and a 2-node efficiency; a
point past its timeout is cancelled (the client itself: test_slurm_client.py)."""
from pathlib import Path

import pytest

from hpc_imagenet.harness import bench
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.runners import local
from hpc_imagenet.slurm.localcluster import SlurmCluster

pytestmark = pytest.mark.slurm


def test_slurm_points_write_records(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(local, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(local, "SCRATCH_DIR", tmp_path / "scratch")  # shared with the nodes: same filesystem
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("PATH", slurm_cluster.env["PATH"])
    out = tmp_path / "r.jsonl"
    rc = bench.main(["train", "--submit", "slurm", "--gpus-per-node", "0", "--cpus-per-task", "1", "--procs", "1",
                     "--nodes", "1", "2", "--image-size", "32", "--batch", "8", "--steps-per-epoch", "7",
                     "--val-steps", "1", "--time-limit", "00:05:00", "--timeout", "120", "--note", "test cluster",
                     "--records", str(out), "--tag", "t"])
    good, bad = records.load([out])
    assert not bad, bad
    assert [r["status"] for r in good] == ["ok", "ok"], [r["error"] for r in good]
    assert rc == 0
    for rec, nodes in zip(good, (1, 2)):
        m, env = rec["metrics"], rec["environment"]
        assert rec["runner"] == "slurm" and rec["note"] == "test cluster"
        assert m["world_size"] == nodes and m["nodes"] == nodes and env["nodes"] == nodes
        assert m["images_per_s"] > 0 and m["measured_steps"] > 0
        assert env["hostname"].startswith("node") and env["slurm_job_id"]
        assert "run.json" in rec["kept_files"] and "job.sh" not in rec["kept_files"]  # only what the report reads
    assert good[0]["environment"]["slurm_job_id"] != good[1]["environment"]["slurm_job_id"]
    assert good[1]["metrics"]["baseline_world_size"] == 1 and 0 < good[1]["metrics"]["scaling_efficiency"]


def test_slurm_point_past_its_timeout_is_cancelled_not_left_queued(slurm_cluster: SlurmCluster, tmp_path: Path,
                                                                   monkeypatch) -> None:
    monkeypatch.setattr(local, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(local, "SCRATCH_DIR", tmp_path / "scratch")
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("PATH", slurm_cluster.env["PATH"])
    out = tmp_path / "r.jsonl"
    # --timeout 15: time for the job to start (its output file is checked below), far short of 100000 steps
    rc = bench.main(["train", "--submit", "slurm", "--gpus-per-node", "0", "--cpus-per-task", "1", "--procs", "1",
                     "--nodes", "1", "--image-size", "32", "--batch", "8", "--steps-per-epoch", "100000",
                     "--time-limit", "00:05:00", "--timeout", "15", "--records", str(out), "--tag", "t"])
    (rec,) = records.load([out])[0]
    assert rc == 1 and rec["status"] == "failed" and "exit code 124" in rec["error"], rec["error"]
    (output,) = (tmp_path / "scratch").rglob("slurm-*.out")  # the job started: its output names its id
    job = output.stem.removeprefix("slurm-")
    state = slurm_cluster.wait_finished(job)["State"]
    assert state.startswith("CANCELLED"), state  # scancel'd by the harness: nothing stays queued or running
