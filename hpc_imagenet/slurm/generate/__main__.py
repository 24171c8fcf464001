"""``python -m hpc_imagenet.slurm.generate``: see hpc_imagenet/slurm/generate/cli.py."""
import sys

from hpc_imagenet.slurm.generate.cli import main

sys.exit(main())
