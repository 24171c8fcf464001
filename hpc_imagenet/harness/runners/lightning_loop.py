"""PyTorch Lightning's Trainer on the same step as the engine, for the train bench's ``lightning`` setup: the same
torchvision model, data folder (the engine's loaders, as hpc_imagenet.imagenet.data.lightning_data.ImageNetDataModule
hands them to Lightning), batch, SGD and cross-entropy, fp32, under the same torchrun launch.

The train bench runs it as it runs an entry script (hpc_imagenet/harness/core/setups.py): it takes the flags the
bench passes (the others are ignored), times the steps after the engine's warm-up count as the engine does (the
steady steps' span over their images; each step's wait for its batch apart from the rest), marks where the time
before the first step went as the engine does (hpc_imagenet.imagenet.common.startup), and writes the part of
run.json that the bench reads. Written here rather than with Lightning's own profilers: the numbers must be
counted the engine's way to stand beside the engine's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import lightning.pytorch as pl
import torch
import torchvision
from lightning.pytorch.strategies import DDPStrategy

from hpc_imagenet.imagenet.common import startup
from hpc_imagenet.imagenet.config import WARMUP_STEPS
from hpc_imagenet.imagenet.data.lightning_data import ImageNetDataModule
from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.harness.runners.common import write_loop_run

IMPORTED = time.time()  # the start-up's first stage ends here: the clock runs from the process's start


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", nargs="?")
    p.add_argument("-a", "--arch", default="resnet18")
    p.add_argument("-b", "--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--dummy", action="store_true")
    p.add_argument("--log-dir", type=Path, required=True)
    for unused in ("--epochs", "--val-steps", "--opt-level", "--amp-dtype", "--dist-backend"):  # the engine's
        p.add_argument(unused)  # taken with their values, which would otherwise be read as the data folder
    return p.parse_known_args(argv)[0]


class Classifier(pl.LightningModule):
    """ARCH for the data module's classes: cross-entropy, SGD as the engine's defaults (momentum 0.9, wd 1e-4)."""

    def __init__(self, arch: str, timeline: startup.Timeline) -> None:
        super().__init__()
        self.arch, self.timeline = arch, timeline

    def configure_model(self) -> None:
        if not hasattr(self, "net"):
            self.net = torchvision.models.get_model(self.arch, num_classes=self.trainer.datamodule.num_classes)
        self.timeline.mark("model built")

    def training_step(self, batch, batch_idx):
        images, target = batch
        return torch.nn.functional.cross_entropy(self.net(images), target)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


class StepClock(pl.Callback):
    """Each step's start and end (rank 0's clock; DDP keeps the ranks in step), and the first step's mark."""

    def __init__(self, timeline: startup.Timeline) -> None:
        self.timeline = timeline
        self.starts: List[float] = []
        self.ends: List[float] = []

    def setup(self, trainer, pl_module, stage: str) -> None:  # after the data module's own set-up
        self.timeline.mark("process group and data (the dataset scan, the loaders)")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ends.append(time.perf_counter())
        self.timeline.mark("first training step")

    def throughput(self, batch: int, world: int) -> dict:
        """The engine's steady-state numbers: steps after the warm-up, their span over their images."""
        warm = min(WARMUP_STEPS, len(self.ends) // 4)
        steady = len(self.ends) - warm - 1
        if steady < 1:
            raise SystemExit(f"error: {len(self.ends)} steps are too few to time: pass --steps-per-epoch "
                             f"{WARMUP_STEPS + 2} or more")
        seconds = self.ends[-1] - self.ends[warm]
        waits = [start - end for start, end in zip(self.starts[warm + 1:], self.ends[warm:])]
        computes = [end - start for start, end in zip(self.starts[warm + 1:], self.ends[warm + 1:])]
        rate = steady * batch * world / seconds
        return {"images_per_s": rate, "images_per_s_per_process": rate / world,
                "step_time_ms": 1000 * seconds / steady, "data_time_ms": 1000 * statistics.median(waits),
                "compute_time_ms": 1000 * statistics.median(computes), "warmup_steps": warm,
                "measured_steps": steady, "peak_memory_bytes": None}


def measure(args: argparse.Namespace) -> dict:
    if args.dummy or not args.data:
        raise SystemExit("error: the Lightning loop reads a dataset folder (ImageNetDataModule): pass --data DIR")
    data = ImageNetDataModule(args.data, batch_size=args.batch_size, image_size=args.image_size,
                              workers=args.workers)
    timeline = startup.Timeline()  # this run's own: a process may run several (the tests)
    timeline.mark("imports (torch, Lightning)", now=IMPORTED)
    clock = StepClock(timeline)
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # torchrun's layout, as Lightning checks it
    nodes = max(1, int(os.environ.get("WORLD_SIZE", devices)) // devices)
    # one process: no process group (as the engine's one-process runs), which Lightning's DDP would leave behind
    strategy = DDPStrategy() if devices * nodes > 1 else "auto"
    trainer = pl.Trainer(accelerator="auto", devices=devices, num_nodes=nodes, strategy=strategy,
                         max_steps=args.steps_per_epoch, limit_val_batches=0, num_sanity_val_steps=0,
                         use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[clock])
    trainer.fit(Classifier(args.arch, timeline), datamodule=data)
    device = trainer.strategy.root_device
    return {"throughput": clock.throughput(args.batch_size, trainer.world_size),
            "dist": {"world_size": trainer.world_size, "nodes": trainer.num_nodes, "device": device.type,
                     "backend": getattr(trainer.strategy, "process_group_backend", None)},
            "global_batch": args.batch_size * trainer.world_size, "precision": {"label": "fp32"}, "epochs": [],
            "final": {}, "status": "finished", "environment": sysinfo.collect(nodes=trainer.num_nodes),
            "startup": timeline.breakdown(), "rank": trainer.global_rank}


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(argv)
    run = measure(args)
    if run.pop("rank") == 0:
        write_loop_run(args.log_dir, run, "Lightning loop")
    return 0


if __name__ == "__main__":
    from hpc_imagenet.harness.runners.lightning_loop import main  # under its one name, not a copy
    sys.exit(main())
