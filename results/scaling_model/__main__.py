"""``python -m results.scaling_model --check``: predicted vs every published point (results.analysis.whole_step);
``--check-time-to-accuracy``: predicted vs published time to train (results.report.tta_check)."""
import sys

from results.analysis.whole_step import main
from results.report import tta_check

sys.exit(tta_check.main() if "--check-time-to-accuracy" in sys.argv[1:] else main())
