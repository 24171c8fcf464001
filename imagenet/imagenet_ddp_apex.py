#!/usr/bin/env python
"""DDP ImageNet training with mixed precision (--opt-level O0-O3): NVIDIA Apex AMP when apex.amp is installed, torch.amp otherwise."""
import os
import sys

if __package__ in (None, ""):  # run as a file: import the project package, not this folder's modules
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from imagenet.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("amp"))
