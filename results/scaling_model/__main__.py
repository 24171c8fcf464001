"""``python -m results.scaling_model --check``: predicted vs every published point (results.analysis.whole_step)."""
import sys

from results.analysis.whole_step import main

sys.exit(main())
