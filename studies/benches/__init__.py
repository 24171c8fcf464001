"""One-off benches, each run for one question with a handful of records.

- :mod:`.region`: decoding a crop box, the C region decoder against nvImageCodec's;
- :mod:`.overlap`: the all-reduce time DDP leaves exposed per step;
- :mod:`.prepare` (with :mod:`.archive_set`): importing ImageNet's archives, on a generated download.

``python -m studies.benches KIND ...`` runs one and appends to ``records/``; ``python -m studies.benches
report`` writes ``RESULTS.md`` here.
"""
from pathlib import Path

from hpc_imagenet.harness.report.words import Words

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
words = Words(HERE / "text")  # this study's words, read by its sections alone

from studies.benches import kinds  # noqa: E402,F401  (declares this study's record kinds)
