"""A plain DDP training script, as people bring their own, that keeps the requeue contract of the generated batch
files (hpc_imagenet.requeue: four calls, marked CONTRACT below; checkpoints written atomically by rank 0).

    python -m hpc_imagenet.slurm.generate --script launch/examples/train_ddp.py --nodes 2 --gpus-per-node 4 \\
        -- --steps 2000 > my_job.sh && sbatch my_job.sh

torchrun (or the batch file) sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK; the model is a small
CNN on seeded random batches, so the example runs anywhere. ``--trace FILE`` appends "RANK STEP RUN" for every step a
rank trains, RUN being the job's run (SLURM_RESTART_COUNT): to check that a requeued job trains every step once.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from hpc_imagenet import requeue


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--print-every", type=int, default=10)
    parser.add_argument("--trace", help="append 'RANK STEP RUN' for each step trained to this file")
    return parser.parse_args()


def batch(step, rank, size, seed):
    """The same images for the same (step, rank), whatever happened before: a resumed run sees what it would have."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    images = torch.randn(size, 3, 32, 32, generator=gen)
    return images, (images.mean(dim=(1, 2, 3)) > 0).long()


def model():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(16 * 16, 2))


def main():
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    torch.manual_seed(args.seed)
    net = DDP(model().to(device), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    start = 0
    checkpoint = requeue.latest()  # CONTRACT: the newest checkpoint of this run folder, None on the first start
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        net.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from {checkpoint} at step {start}", flush=True)
    began = time.perf_counter()
    for step in range(start, args.steps):
        if requeue.should_stop():  # CONTRACT: the same answer on every rank, at a step boundary
            requeue.save({"model": net.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
            requeue.stop()  # CONTRACT: marks the run folder and exits 75: the batch file requeues the job
        images, labels = (t.to(device) for t in batch(step, rank, args.batch_size, args.seed))
        loss = nn.functional.cross_entropy(net(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        requeue.step_done(args.batch_size * world)  # for the scaling harness (optional)
        if args.trace:
            with open(args.trace, "a") as trace:
                trace.write(f"{rank} {step} {os.environ.get('SLURM_RESTART_COUNT', '0')}\n")
        if rank == 0 and (step + 1) % args.print_every == 0:
            rate = (step + 1 - start) * args.batch_size * world / (time.perf_counter() - began)
            print(f"step {step + 1}/{args.steps} loss {loss.item():.4f} images/s {rate:.1f}", flush=True)
    requeue.save({"model": net.module.state_dict(), "optimizer": optimizer.state_dict(), "step": args.steps})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
