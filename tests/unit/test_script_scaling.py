"""Your own script measured: the step log it writes (requeue.step_done), the numbers and records the scaling
harness makes of it (bench scaling --script), and the batch file each point runs."""
from __future__ import annotations

import argparse

import pytest
import torch

from hpc_imagenet import requeue
from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import cluster, training
from hpc_imagenet.harness.runners import script_points
from hpc_imagenet.harness.runners.common import BenchError
from hpc_imagenet.requeue import steps
from tests.helpers import REPO

EXAMPLE = str(REPO / "launch" / "examples" / "train_ddp.py")


def _write(path, *runs):
    """A steps.tsv of RUNS, each a list of (time, images)."""
    lines = []
    for run in runs:
        lines.append(f"{steps.START} {run[0][0] - 1:.6f}")
        lines += [f"{t:.6f}\t{n}" for t, n in run]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_step_done_writes_a_run_line_then_one_line_a_step_from_rank_0_when_measured(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(requeue.RUN_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.setattr(requeue, "_steps", None)
    monkeypatch.delenv(requeue.MEASURED_ENV, raising=False)
    requeue.step_done(64)  # not measured: a run outside the harness logs nothing
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv(requeue.MEASURED_ENV, "1")
    for _ in range(3):
        requeue.step_done(64)
    (run,) = steps.segments(tmp_path / "run" / steps.STEPS_FILE)
    assert [n for _, n in run] == [64, 64, 64] and run[0][0] <= run[1][0] <= run[2][0]
    monkeypatch.setattr(requeue, "_rank", lambda: 1)
    requeue.step_done(64)  # another rank: nothing written
    assert len(steps.segments(tmp_path / "run" / steps.STEPS_FILE)[0]) == 3


def test_the_steady_steps_of_each_run_give_the_speed(tmp_path) -> None:
    warm = [(100.0 + 5 * i, 32) for i in range(script_points.WARMUP_STEPS)]  # start-up: slow, left out
    first = warm + [(125.0 + i, 32) for i in range(11)]  # 10 steps of 32 images in 10 s after the warm-up
    second = [(500.0 + 9 * i, 32) for i in range(script_points.WARMUP_STEPS)] + [(600.0 + 2 * i, 32)
                                                                                  for i in range(6)]
    path = _write(tmp_path / steps.STEPS_FILE, first, second)
    m = script_points.metrics(path, world_size=4)
    assert m["images_per_s"] == pytest.approx((10 + 5) * 32 / (10 + 10))  # 480 images in 20 s
    assert m["images_per_s_per_process"] == pytest.approx(m["images_per_s"] / 4)
    assert m["step_time_ms"] == pytest.approx(1000) and m["measured_steps"] == 15 and m["global_batch"] == 32


def test_too_few_steps_or_none_are_one_line(tmp_path) -> None:
    with pytest.raises(ValueError, match="recorded no steps .*step_done"):
        script_points.metrics(tmp_path / steps.STEPS_FILE, 2)
    path = _write(tmp_path / steps.STEPS_FILE, [(1.0 + i, 8) for i in range(script_points.WARMUP_STEPS + 1)])
    with pytest.raises(ValueError, match="no run of more than .* train longer"):
        script_points.metrics(path, 2)


def _args(**more) -> argparse.Namespace:
    base = dict(script=EXAMPLE, script_args="--steps 40", framework="plain", launcher="torchrun", gpus_per_node=0,
                procs_per_node=2, data="dummy", time="00:10:00", python=None, setup=[], cpus_per_task=1,
                partition=None, account=None, qos=None, constraint=None)
    return argparse.Namespace(**{**base, **more})


def test_each_node_count_is_the_generators_batch_file_without_the_requeue(tmp_path) -> None:
    args = _args()
    points = script_points.points(args, [2, 1, 2])
    assert [(p.nodes, p.procs_per_node, p.extra_args) for p in points] == [(1, 2, ("--steps", "40")),
                                                                           (2, 2, ("--steps", "40"))]
    text = script_points.batch_file(points[1], args, tmp_path)
    assert "#SBATCH --nodes=2" in text and '-m hpc_imagenet.requeue "$SCRIPT"' in text
    assert "TRAIN_ARGS+=(--steps 40)" in text and "trap on_preempt" not in text and "scontrol requeue" not in text
    with pytest.raises(BenchError, match="--script nope.py: no such file here"):
        script_points.points(_args(script="nope.py"), [1])
    with pytest.raises(BenchError, match="--script: --launcher mpi with --script: use torchrun"):
        script_points.batch_file(points[0], _args(launcher="mpi"), tmp_path)


def test_a_points_record_is_a_train_record_the_report_names_as_your_script(tmp_path) -> None:
    point = script_points.points(_args(), [2])[0]
    _write(tmp_path / steps.STEPS_FILE, [(10.0 + i, 64) for i in range(12)])
    (tmp_path / "slurm-7.out").write_text("step 40/40\n2026-12-06T00:00:00+00:00 training exited with status 0\n")
    rec = kinds.from_dict(script_points.record(point, "sweep", tmp_path, None, {"runner": "slurm"}))
    assert rec.ok and rec.metrics.images_per_s == pytest.approx(64) and rec.world_size == 4
    assert training.series_name(rec) == ("your script train_ddp.py (--framework=plain --steps 40), batch 16/process, "
                                         "SLURM 2 proc/node")
    (tmp_path / "slurm-7.out").write_text("Traceback ...\nValueError: boom\ntraining exited with status 1\n")
    failed = kinds.from_dict(script_points.record(point, "sweep", tmp_path, None, {}))
    assert not failed.ok and failed.error.startswith("the script exited with 1")


def test_the_lightning_callback_counts_the_batchs_images() -> None:
    lightning = pytest.importorskip("hpc_imagenet.requeue.lightning", reason="the lightning extra")
    images = torch.zeros(16, 3, 8, 8)
    assert lightning._batch_size((images, torch.zeros(16))) == 16
    assert lightning._batch_size({"image": images}) == 16 and lightning._batch_size(object()) == 0


def test_the_cluster_report_takes_a_script_sweep(tmp_path) -> None:
    """Two points' records, as the sweep writes them, through the per-cluster report."""
    out = tmp_path / "t.jsonl"
    for nodes, rate in ((1, 100), (2, 190)):
        scratch = tmp_path / f"n{nodes}"
        scratch.mkdir()
        _write(scratch / steps.STEPS_FILE, [(10.0 + i * 64 * nodes / rate, 64 * nodes) for i in range(12)])
        (scratch / "slurm-1.out").write_text("training exited with status 0\n")
        (point,) = script_points.points(_args(), [nodes])
        records.append(out, script_points.record(point, "t-train-x", scratch, None, {"runner": "slurm"}))
    cluster.build_tag("t", out, tmp_path / "report", quiet_share=1)
    text = (tmp_path / "report" / "README.md").read_text()
    assert "your script train_ddp.py (--framework=plain --steps 40), batch 32/process" in text
    assert "190" in text and "95" in text  # 2 nodes' images/s, and their efficiency against 1 node's (%)
