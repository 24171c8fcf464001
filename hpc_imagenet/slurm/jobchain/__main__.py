"""``python -m hpc_imagenet.slurm.jobchain``."""
import sys

from hpc_imagenet.slurm.jobchain.chain_commands import main

sys.exit(main())
