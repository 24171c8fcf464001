"""``python -m slurm.pipeline``."""
import sys

from slurm.pipeline.cli import main

sys.exit(main())
