"""Exposed DDP communication per training step: how much gradient all-reduce backward fails to hide.

DDP all-reduces gradient buckets while backward is still running. Every rank times the same
forward + backward + SGD step of one model and batch twice, alternating: normally (all-reduce on)
and inside ``no_sync()`` (all-reduce off). The difference of the medians (slowest rank) is the
communication the step still waits for, the *exposed* time. The all-reduce of the whole gradient,
timed alone, is the communication there is to hide, so hidden fraction = 1 - exposed / alone.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Dict, List

import torch
import torch.distributed as dist
import torchvision

from hpc_imagenet.harness.runners import common
from hpc_imagenet.harness.runners.allreduce_bench import slowest
from hpc_imagenet.harness.runners.common import add_flags
from hpc_imagenet.harness.runners.procs import run_ranks
from studies.common.overlap import hidden_fraction


def _timed_steps(ddp, opt, images, targets, steps: int) -> Dict[str, float]:
    """Median seconds of a synced and an unsynced step, interleaved so drift hits both alike."""
    loss_fn = torch.nn.CrossEntropyLoss()
    times = {True: [], False: []}
    for i in range(2 * steps):
        sync = i % 2 == 0
        dist.barrier()  # start both kinds of step from the same place on every rank
        t0 = time.perf_counter()
        with contextlib.nullcontext() if sync else ddp.no_sync():
            loss_fn(ddp(images), targets).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times[sync].append(time.perf_counter() - t0)
    return {"sync": statistics.median(times[True]), "local": statistics.median(times[False])}


def _allreduce_alone(numel: int, reps: int = 5) -> float:
    buf = torch.ones(numel)
    dist.all_reduce(buf)  # warm-up
    ts = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def measure_in_group(arch: str, batch: int, image_size: int, steps: int, bucket_cap_mb: float) -> Dict[str, float]:
    """Run in an initialised (CPU, gloo) process group (procs.run_ranks spawns one); every rank returns the
    same numbers."""
    torch.set_num_threads(1)  # ranks share the cores, as under torchrun
    torch.manual_seed(0)
    model = torchvision.models.get_model(arch, num_classes=1000)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size)
    y = torch.randint(0, 1000, (batch,))
    _timed_steps(ddp, opt, x, y, 2)  # warm-up: allocator, bucket rebuild after the first iteration
    t = _timed_steps(ddp, opt, x, y, steps)
    numel = sum(p.numel() for p in model.parameters())
    step_ms, local_ms = slowest(t["sync"]) * 1e3, slowest(t["local"]) * 1e3
    alone_ms = slowest(_allreduce_alone(numel)) * 1e3
    exposed = max(step_ms - local_ms, 0.0)
    return {"step_time_ms": step_ms, "step_no_allreduce_ms": local_ms, "exposed_comm_ms": exposed,
            "allreduce_alone_ms": alone_ms, "hidden_fraction": hidden_fraction(exposed, alone_ms),
            "grad_bytes": numel * 4, "world_size": dist.get_world_size(), "steps": steps}


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    o = sub.add_parser("overlap", parents=[common], help="exposed DDP all-reduce time per step (gloo, this host)")
    o.add_argument("--steps", type=int, default=10, help="timed steps of each kind (interleaved)")
    add_flags(o, world_sizes=[2], arch="resnet18", batch=16, image_size=64, bucket_cap_mb=[25.0])


def run(args: argparse.Namespace) -> List[dict]:
    sweep = common.new_sweep("overlap", args)
    points = [(n, mb) for n in args.world_sizes for mb in args.bucket_cap_mb]
    for i, (n, mb) in enumerate(points, 1):
        common.progress(i, len(points), f"overlap {args.arch}, {n} processes, buckets {mb:g} MB")
        point = {"backend": "gloo", "world_size": n, "arch": args.arch, "batch_size": args.batch,
                 "image_size": args.image_size, "bucket_cap_mb": mb}
        try:
            m = run_ranks(n, measure_in_group, (args.arch, args.batch, args.image_size, args.steps, mb))
        except Exception as e:  # a failed point is recorded with why, and the sweep goes on
            sweep.add(point, {}, "failed", common.last_line(str(e)))
        else:
            sweep.add(point, m)
    return sweep.done
