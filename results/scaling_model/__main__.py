"""``python -m results.scaling_model --check``: predicted vs every published point (results.analysis.whole_step);
``--check-time-to-accuracy``: predicted vs published time to train (results.scaling_model.time_to_accuracy)."""
import sys

from results.analysis.whole_step import main
from results.scaling_model import time_to_accuracy

sys.exit(time_to_accuracy.main() if "--check-time-to-accuracy" in sys.argv[1:] else main())
