"""``python -m results.pipeline_bench``: per-core decode cost of the data backends (results.runners.pipeline_bench)."""
import sys

from results.runners.pipeline_bench import main

sys.exit(main())
