"""``python -m imagenet.prepare ARCHIVES DST`` (ImageNet's download straight to shards or an ImageFolder).

The code is :mod:`imagenet.data.prepare`; import from there.
"""
import sys

from hpc_imagenet.imagenet.data.prepare import main

if __name__ == "__main__":
    sys.exit(main())
