"""A bare PyTorch training loop, the yardstick for what the engine adds to a step: torchvision's model on
synthetic tensors, cross-entropy, SGD, optional autocast (bf16/fp16) and channels-last; no loader, no
logging, no process group.

The train bench runs it as it runs an entry script (setups ``bare*``, hpc_imagenet/harness/core/setups.py): it takes the
flags the bench passes (the others are ignored), times the steps after the engine's warm-up count the way
the engine does (device synced at the ends only), and writes the part of run.json that the bench reads.
Written here rather than taken from a library: what it measures is the absence of everything a library adds.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import torch
import torchvision

from hpc_imagenet.imagenet.config import WARMUP_STEPS
from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.harness.runners.common import write_loop_run


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-a", "--arch", default="resnet18")
    p.add_argument("-b", "--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--opt-level", default="O0", choices=("O0", "O1"))
    p.add_argument("--amp-dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--log-dir", type=Path, required=True)
    return p.parse_known_args(argv)[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model, optimizer, images, target, autocast) -> torch.Tensor:
    with autocast():
        loss = torch.nn.functional.cross_entropy(model(images), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def measure(args: argparse.Namespace) -> dict:
    """Steady-state throughput of the bare loop; the warm-up steps as the engine counts them."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = torchvision.models.get_model(args.arch, num_classes=args.num_classes).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device).to(memory_format=layout)
    target = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
    enabled = args.opt_level == "O1"

    def autocast():
        return torch.autocast(device.type, dtype=dtype, enabled=enabled)

    warm = min(WARMUP_STEPS, args.steps_per_epoch // 4)
    for _ in range(warm):
        _step(model, optimizer, images, target, autocast)
    _sync(device)
    steps, start = args.steps_per_epoch - warm, time.perf_counter()
    for _ in range(steps):
        _step(model, optimizer, images, target, autocast)
    _sync(device)
    seconds = time.perf_counter() - start
    step_ms = 1000 * seconds / steps
    label = f"O1-{'bf16' if dtype == torch.bfloat16 else 'fp16'}" if enabled else "fp32"
    return {"throughput": {"images_per_s": steps * args.batch_size / seconds,
                           "images_per_s_per_process": steps * args.batch_size / seconds, "step_time_ms": step_ms,
                           "data_time_ms": 0.0, "compute_time_ms": step_ms, "warmup_steps": warm,
                           "measured_steps": steps, "peak_memory_bytes": None},
            "dist": {"world_size": 1, "nodes": 1, "device": device.type, "backend": None},
            "global_batch": args.batch_size, "precision": {"label": label}, "epochs": [], "final": {},
            "status": "finished", "environment": sysinfo.collect()}


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(argv)
    write_loop_run(args.log_dir, measure(args), "bare loop")
    return 0


if __name__ == "__main__":
    from hpc_imagenet.harness.runners.bare_loop import main  # under its one name, not a copy
    sys.exit(main())
