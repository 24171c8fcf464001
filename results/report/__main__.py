"""``python -m results.report``."""
import sys

from hpc_imagenet.results.report import main

sys.exit(main())
