"""``python -m hpc_imagenet.slurm.pipeline``."""
import sys

from hpc_imagenet.slurm.pipeline.cli import main

sys.exit(main())
