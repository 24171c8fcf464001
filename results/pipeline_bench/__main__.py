"""``python -m results.pipeline_bench``."""
import sys

from results.pipeline_bench import main

sys.exit(main())
