"""``python -m results.scaling_model --check``."""
import sys

from results.scaling_model import main

sys.exit(main())
