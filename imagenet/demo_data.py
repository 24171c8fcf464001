"""``python -m imagenet.demo_data`` (write a small synthetic ImageFolder): the command's old name, kept working.

The code is :mod:`imagenet.data.demo`; import from there.
"""
import sys

from hpc_imagenet.imagenet.data.demo import main

if __name__ == "__main__":
    sys.exit(main())
