"""A PyTorch Lightning training script that keeps the requeue contract of the generated batch files with one
callback (hpc_imagenet.requeue.lightning.Requeue, marked CONTRACT below).

    python -m hpc_imagenet.slurm.generate --script launch/examples/train_lightning.py --framework lightning \\
        --nodes 2 --gpus-per-node 4 -- --steps 2000 > my_job.sh && sbatch my_job.sh

The same script runs under torchrun (one agent per node) and under srun (one task per process); the number of
devices and nodes is read from the launcher's variables. With ``--native`` it leaves the stop to Lightning's own
SLURM auto-requeue instead (``--framework lightning-native``, srun only): no callback, Lightning's checkpoints in
the run folder (``default_root_dir``), restored by Lightning on the next start; nothing of hpc_imagenet imported.

The model is a small CNN on seeded random batches, made
from the step they train (so a resumed run trains on what it would have); ``--trace FILE`` appends
"RANK STEP RUN" for every step a rank trains, RUN being the job's run (SLURM_RESTART_COUNT).
"""
import argparse
import os

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import nn


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--print-every", type=int, default=10)
    parser.add_argument("--trace", help="append 'RANK STEP RUN' for each step trained to this file")
    parser.add_argument("--native", action="store_true", help="Lightning's own SLURM auto-requeue (under srun) "
                        "instead of the callback")
    return parser.parse_args()


class StepBatches(torch.utils.data.IterableDataset):
    """Batch after batch from step FIRST on; each made from (seed, step, rank) alone."""

    def __init__(self, first: int, rank: int, size: int, seed: int) -> None:
        self.first, self.rank, self.size, self.seed = first, rank, size, seed

    def __iter__(self):
        step = self.first
        while True:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 1009 + self.rank)
            images = torch.randn(self.size, 3, 32, 32, generator=gen)
            yield images, (images.mean(dim=(1, 2, 3)) > 0).long()
            step += 1


class SmallCNN(pl.LightningModule):
    def __init__(self, args) -> None:
        super().__init__()
        self.args = args
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                                 nn.Linear(16 * 16, 2))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = nn.functional.cross_entropy(self.net(images), labels)
        if self.args.trace:
            with open(self.args.trace, "a") as trace:
                trace.write(f"{self.global_rank} {self.global_step} {os.environ.get('SLURM_RESTART_COUNT', '0')}\n")
        if self.global_rank == 0 and (self.global_step + 1) % self.args.print_every == 0:
            print(f"step {self.global_step + 1}/{self.args.steps} loss {loss.item():.4f}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.args.lr, momentum=0.9)

    def train_dataloader(self):
        # the step this run starts at: the checkpoint's when resumed (restored before the loaders are made)
        first = self.trainer.global_step
        return torch.utils.data.DataLoader(StepBatches(first, self.global_rank, self.args.batch_size, self.args.seed),
                                           batch_size=None)


def layout():
    """(devices per node, nodes) from torchrun's or srun's variables; one process elsewhere."""
    env = os.environ
    devices = int(env.get("LOCAL_WORLD_SIZE") or env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    world = int(env.get("WORLD_SIZE") or env.get("SLURM_NTASKS", "1"))
    return devices, max(1, world // devices)


def main():
    args = parse_args()
    pl.seed_everything(args.seed, workers=True)
    devices, nodes = layout()
    common = dict(accelerator="cpu" if not torch.cuda.is_available() else "gpu", devices=devices, num_nodes=nodes,
                  strategy=DDPStrategy(process_group_backend=None), max_steps=args.steps, logger=False,
                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    if args.native:  # Lightning's SLURMEnvironment saves hpc_ckpt_N.ckpt here at the signal, and restores it
        trainer = pl.Trainer(default_root_dir=os.environ.get("HPC_IMAGENET_RUN_DIR", "."), **common)
        trainer.fit(SmallCNN(args))
        return
    from hpc_imagenet.requeue.lightning import Requeue

    trainer = pl.Trainer(callbacks=[Requeue()], **common)  # CONTRACT: checkpoint and stop at the signal
    trainer.fit(SmallCNN(args), ckpt_path=Requeue.resume_from())  # CONTRACT: the newest checkpoint, if any


if __name__ == "__main__":
    main()
