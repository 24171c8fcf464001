"""``python -m hpc_imagenet.harness.report``."""
import sys

from hpc_imagenet.harness.report import main

sys.exit(main())
