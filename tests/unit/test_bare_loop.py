"""The bare PyTorch loop the engine's step is measured against: it trains, writes what the train bench reads,
and runs as one process only."""
import json

import pytest

from hpc_imagenet.harness.core.setups import SETUPS
from hpc_imagenet.harness.runners import bare_loop, train_bench


@pytest.mark.parametrize("flags", [[], ["--opt-level", "O1", "--amp-dtype", "bfloat16", "--channels-last"]])
def test_the_bare_loop_writes_what_the_bench_reads(tmp_path, flags):
    assert bare_loop.main(["-a", "resnet18", "-b", "4", "--image-size", "16", "--steps-per-epoch", "8",
                           "--num-classes", "4", "--log-dir", str(tmp_path), "--workers", "0", "--dummy", *flags]) == 0
    run = json.loads((tmp_path / "run.json").read_text())
    metrics = train_bench.metrics_from_run(run)  # the bench's own reader
    assert metrics["warmup_steps"] == 2 and metrics["measured_steps"] == 6  # the engine's warm-up rule: 8 // 4
    assert metrics["images_per_s"] > 0 and metrics["step_time_ms"] == pytest.approx(4000 / metrics["images_per_s"])
    assert metrics["precision_label"] == ("O1-bf16" if flags else "fp32") and metrics["world_size"] == 1


def test_bare_setups_run_one_process():
    point = train_bench.from_setup(train_bench.TrainPoint(batch_size=8), "bare-bf16-channels-last")
    assert point.variant == "bare" and "--channels-last" in point.extra_args and train_bench.check(point) is None
    assert "--dist-backend" not in train_bench.engine_args(point, "out", cpu=True)
    two = train_bench.from_setup(train_bench.TrainPoint(procs_per_node=2), "bare")
    assert "runs one process" in train_bench.check(two)
    assert {name for name, s in SETUPS.items() if s.variant == "bare"} == {
        "bare", "bare-channels-last", "bare-bf16", "bare-bf16-channels-last"}
