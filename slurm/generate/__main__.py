"""``python -m slurm.generate``: see slurm/generate/cli.py."""
import sys

from slurm.generate.cli import main

sys.exit(main())
