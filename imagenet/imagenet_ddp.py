#!/usr/bin/env python
"""DistributedDataParallel ImageNet training: one process per GPU, started by torchrun,
torch.distributed.launch, MPI, SLURM or --dist-url."""
import os
import sys

if __package__ in (None, ""):  # run as a file: import the project package, not this folder's modules
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    # first: a stop signal during the slow imports must not be lost
    from hpc_imagenet.imagenet.process import preemption

    preemption.install_early()
    from hpc_imagenet.imagenet.run.train_command import main

    sys.exit(main("ddp"))
