"""``python -m slurm.generate``: see slurm/generate/cli.py."""
import sys

from hpc_imagenet.slurm.generate.cli import main

sys.exit(main())
