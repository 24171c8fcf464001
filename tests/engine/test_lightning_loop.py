"""PyTorch Lightning's Trainer on the engine's step, as the train bench's ``lightning`` setup runs it: it trains on a
data folder through ImageNetDataModule, writes what the bench reads with the engine's warm-up rule, and marks where
its time before the first step went; without a data folder it says so in one line."""
import json

import pytest
import torch

from hpc_imagenet.harness.core.setups import SETUPS
from hpc_imagenet.harness.runners import lightning_loop, train_bench
from hpc_imagenet.imagenet.data import demo


def test_the_lightning_loop_writes_what_the_bench_reads(tmp_path):
    root = demo.generate(tmp_path / "photos", classes=2, train_per_class=16, val_per_class=1, size=(40, 32))
    point = train_bench.from_setup(train_bench.TrainPoint(batch_size=4, image_size=16, steps_per_epoch=8,
                                                          data=str(root)), "lightning")
    args = train_bench.engine_args(point, tmp_path / "run", cpu=True)  # the flags the bench passes, as given
    assert lightning_loop.main(args) == 0
    assert not torch.distributed.is_initialized()  # one process: no group left behind for the next test
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    metrics = train_bench.metrics_from_run(run)  # the bench's own reader
    assert metrics["warmup_steps"] == 2 and metrics["measured_steps"] == 5  # 8 steps: 2 warm-up, 6 ends, 5 spans
    assert metrics["images_per_s"] > 0 and metrics["step_time_ms"] == pytest.approx(4000 / metrics["images_per_s"])
    assert metrics["world_size"] == 1 and metrics["precision_label"] == "fp32"
    stages = [stage["stage"] for stage in run["startup"]["stages"]]
    assert stages == ["imports (torch, Lightning)", "process group and data (the dataset scan, the loaders)",
                      "model built", "first training step"]
    assert SETUPS["lightning"].variant == "lightning" and train_bench.check(point) is None


def test_without_a_data_folder_it_says_so(tmp_path):
    with pytest.raises(SystemExit, match="the Lightning loop reads a dataset folder .*: pass --data DIR"):
        lightning_loop.main(["--dummy", "--log-dir", str(tmp_path)])
