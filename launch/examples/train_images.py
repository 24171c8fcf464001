"""A plain DDP script of your own on this project's data path: the image folder the batch file gives it (each node's
own copy with --stage-dir), read by hpc_imagenet.imagenet.data.library, under the requeue contract (CONTRACT below).

    python -m hpc_imagenet.slurm.generate --script launch/examples/train_images.py --nodes 2 --gpus-per-node 4 \\
        --data /shared/imagenet --stage-dir '$TMPDIR' -- --epochs 2 > my_job.sh && sbatch my_job.sh

The batch file copies DATA to every node's $TMPDIR before the script starts and the runner hands each node's
processes their copy in $HPC_IMAGENET_DATA (``requeue.data_dir``); outside a batch file the script reads --data.
A run stopped mid-epoch resumes at the exact batch: the loader skips what this rank already trained.
``--trace FILE`` appends "RANK STEP RUN" for every step a rank trains (RUN: the job's SLURM_RESTART_COUNT).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from hpc_imagenet import requeue
from hpc_imagenet.imagenet.data.library import image_loaders


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="dataset folder with train/ and val/ (the batch file's DATA wins)")
    parser.add_argument("--arch", default="resnet18", help="a torchvision model name")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=4, help="loader processes per training process")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--print-every", type=int, default=10)
    parser.add_argument("--trace", help="append 'RANK STEP RUN' for each step trained to this file")
    return parser.parse_args()


def validate(net, data):
    """Top-1 over every validation image once across the ranks."""
    net.eval()
    counts = torch.zeros(2, device=data.device)
    with torch.no_grad():
        for images, target in data.val:
            counts += torch.stack([(net(images).argmax(1) == target).sum(), torch.tensor(len(target),
                                                                                         device=data.device)])
    dist.all_reduce(counts)
    net.train()
    return 100.0 * counts[0].item() / max(counts[1].item(), 1)


def main():
    args = parse_args()
    root = requeue.data_dir(args.data)  # CONTRACT: this node's copy when the batch file staged it
    if root is None:
        print("error: no data: pass --data DIR, or generate the batch file with --data", file=sys.stderr)
        sys.exit(requeue.EXIT_DO_NOT_RETRY)  # CONTRACT: it would fail the same way again
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = image_loaders(root, batch_size=args.batch_size, image_size=args.image_size, workers=args.workers)
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.arch, num_classes=data.num_classes).to(data.device)
    net = DDP(model, device_ids=[data.device.index] if cuda else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr * args.batch_size * world / 256, momentum=0.9)
    per_epoch, step = len(data.train_batches), 0
    checkpoint = requeue.latest()  # CONTRACT: the newest checkpoint of this run folder, None on the first start
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location=data.device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    if rank == 0:
        print(f"reading {root}; {per_epoch} steps an epoch" + (f", resumed at step {step}" if step else ""),
              flush=True)
    began, first = time.perf_counter(), step
    for epoch in range(step // per_epoch, args.epochs):
        data.set_epoch(epoch, samples_done=(step - epoch * per_epoch) * args.batch_size)  # mid-epoch: skip those
        for images, target in data.train:
            if requeue.should_stop():  # CONTRACT: the same answer on every rank, at a step boundary
                requeue.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
                requeue.stop()  # CONTRACT: marks the run folder and exits 75: the batch file requeues the job
            loss = nn.functional.cross_entropy(net(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            requeue.step_done(args.batch_size * world)  # for the scaling harness (optional)
            step += 1
            if args.trace:
                with open(args.trace, "a") as trace:
                    trace.write(f"{rank} {step - 1} {os.environ.get('SLURM_RESTART_COUNT', '0')}\n")
            if rank == 0 and step % args.print_every == 0:
                rate = (step - first) * args.batch_size * world / (time.perf_counter() - began)
                print(f"step {step}/{args.epochs * per_epoch} loss {loss.item():.4f} images/s {rate:.1f}", flush=True)
        top1 = validate(net, data)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} val top1 {top1:.2f}", flush=True)
    requeue.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
