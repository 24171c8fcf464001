"""``python -m imagenet.staging`` (copy a dataset to node-local storage): the command's old name, kept working.

The code is :mod:`imagenet.data.staging`; import from there.
"""
import sys

from hpc_imagenet.imagenet.data.staging import main

if __name__ == "__main__":
    sys.exit(main())
