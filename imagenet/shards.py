"""``python -m imagenet.shards`` (convert an ImageFolder into indexed tar shards): the command's old name, kept working.

The code is :mod:`imagenet.data.shards`; import from there.
"""
import sys

from hpc_imagenet.imagenet.data.shards import main

if __name__ == "__main__":
    sys.exit(main())
