"""A PyTorch Lightning script on your image folders (train/ and val/, as ImageNet's) through this project's data
path (hpc_imagenet.imagenet.data.lightning_data.ImageNetDataModule), under the requeue contract with one callback
(CONTRACT below): the Lightning course's script, with its data staged to each node and its stops requeued.

    python -m hpc_imagenet.slurm.generate --script launch/examples/train_lightning_images.py --framework lightning \\
        --nodes 2 --gpus-per-node 4 --data /shared/imagenet --stage-dir '$TMPDIR' -- --epochs 2 > my_job.sh
    sbatch my_job.sh

The batch file copies DATA to every node's $TMPDIR before the script starts and hands each node's processes their
copy in $HPC_IMAGENET_DATA (``requeue.data_dir``); outside a batch file the script reads --data. The model is
built once the data module knows the classes (``configure_model``). A run stopped in mid-epoch resumes at the next
batch. ``--trace FILE`` appends "RANK STEP RUN" for every step a rank trains (RUN: the job's SLURM_RESTART_COUNT).
"""
import argparse
import os
import sys

import lightning.pytorch as pl
import torch
import torchvision
from lightning.pytorch.strategies import DDPStrategy
from torch import nn

from hpc_imagenet import requeue
from hpc_imagenet.imagenet.data.lightning_data import ImageNetDataModule
from hpc_imagenet.requeue.lightning import Requeue


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


class Classifier(pl.LightningModule):
    def __init__(self, args) -> None:
        super().__init__()
        self.args, self.net = args, None

    def configure_model(self):
        # after the data module's setup (its classes are known), before a checkpoint's weights are restored
        if self.net is None:
            self.net = torchvision.models.get_model(self.args.arch, num_classes=self.trainer.datamodule.num_classes)

    def training_step(self, batch, batch_idx):
        images, target = batch
        loss = nn.functional.cross_entropy(self.net(images), target)
        if self.args.trace:
            with open(self.args.trace, "a") as trace:
                trace.write(f"{self.global_rank} {self.global_step} {os.environ.get('SLURM_RESTART_COUNT', '0')}\n")
        if self.global_rank == 0 and (self.global_step + 1) % self.args.print_every == 0:
            total = self.trainer.estimated_stepping_batches
            print(f"step {self.global_step + 1}/{total} loss {loss.item():.4f}", flush=True)
        return loss

    def on_validation_epoch_start(self):
        self.val_counts = torch.zeros(2, device=self.device)  # correct, images

    def validation_step(self, batch, batch_idx):
        images, target = batch
        correct = (self.net(images).argmax(1) == target).sum()
        self.val_counts += torch.stack([correct, torch.tensor(len(target), device=self.device)])

    def on_validation_epoch_end(self):
        # each image once across the ranks (the data module shards validation): summed, not a mean of means
        correct, seen = self.trainer.strategy.reduce(self.val_counts, reduce_op="sum").tolist()
        if self.global_rank == 0:
            print(f"epoch {self.current_epoch + 1}/{self.args.epochs} val top1 {100.0 * correct / max(seen, 1):.2f}",
                  flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.args.lr, momentum=0.9, weight_decay=1e-4)


def devices_and_nodes():
    """(processes per node, nodes) from torchrun's or srun's variables; one process elsewhere."""
    env = os.environ
    per_node = int(env.get("LOCAL_WORLD_SIZE") or env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    return per_node, max(1, int(env.get("WORLD_SIZE") or env.get("SLURM_NTASKS", "1")) // per_node)


def main():
    args = parse_args()
    root = requeue.data_dir(args.data)  # CONTRACT: this node's copy when the batch file staged it
    if root is None:
        print("error: no data: pass --data DIR, or generate the batch file with --data", file=sys.stderr)
        sys.exit(requeue.EXIT_DO_NOT_RETRY)  # CONTRACT: it would fail the same way again
    pl.seed_everything(0, workers=True)
    devices, nodes = devices_and_nodes()
    data = ImageNetDataModule(root, batch_size=args.batch_size, image_size=args.image_size, workers=args.workers)
    trainer = pl.Trainer(accelerator="gpu" if torch.cuda.is_available() else "cpu", devices=devices,
                         num_nodes=nodes, strategy=DDPStrategy(process_group_backend=None), max_epochs=args.epochs,
                         use_distributed_sampler=False,  # the data module gives each rank its share itself
                         num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[Requeue()])  # CONTRACT: checkpoint and stop at the signal
    if trainer.is_global_zero:
        print(f"reading {root}", flush=True)
    trainer.fit(Classifier(args), datamodule=data, ckpt_path=Requeue.resume_from())  # CONTRACT: newest, if any


if __name__ == "__main__":
    main()
