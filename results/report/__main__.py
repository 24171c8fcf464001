"""``python -m results.report``."""
import sys

from results.report import main

sys.exit(main())
