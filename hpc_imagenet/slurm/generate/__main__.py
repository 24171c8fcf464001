"""``python -m hpc_imagenet.slurm.generate``: see hpc_imagenet/slurm/generate/generate_command.py."""
import sys

from hpc_imagenet.slurm.generate.generate_command import main

sys.exit(main())
