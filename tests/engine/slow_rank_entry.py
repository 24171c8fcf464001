#!/usr/bin/env python
"""Test hook: imagenet_ddp.py with one rank's data path slowed down for real.

The rank named by SLOW_RANK sleeps SLOW_DELAY_S before every batch its data loaders hand out, as a
rank behind a slow disk or on a busy node would wait; the other ranks run untouched. Only the
straggler test starts it (under torchrun); nothing in the project imports it.
"""
import os
import sys
import time

sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout

if __name__ == "__main__":
    from hpc_imagenet.imagenet.process import preemption

    preemption.install_early()
    from torch.utils.data import dataloader

    from hpc_imagenet.imagenet.run.train_command import main

    if os.environ.get("RANK") == os.environ["SLOW_RANK"]:
        delay, real_next = float(os.environ["SLOW_DELAY_S"]), dataloader._BaseDataLoaderIter.__next__

        def slow_next(self):
            time.sleep(delay)  # the slowdown itself, not synchronisation
            return real_next(self)

        dataloader._BaseDataLoaderIter.__next__ = slow_next
    sys.exit(main("ddp"))
