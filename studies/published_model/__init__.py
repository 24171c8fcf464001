"""The scaling model checked against published runs (HAL 2020, NVIDIA's DeepLearningExamples, FFCV, MLPerf).

``python -m studies.published_model`` writes the write-up (``RESULTS.md`` here) from the harness's records
and the cited numbers in ``reference/``; ``--check`` and ``--check-time-to-accuracy`` print the model against
every published point and exit 1 on a miss. The formulas are :mod:`.formulas`, the whole-step check's
arithmetic :mod:`.whole_step`, time to train :mod:`.time_to_train`, one cluster's prediction
:mod:`.cluster_model`; the sections' words are in ``text/``.
"""
import json
from pathlib import Path
from typing import Tuple

from hpc_imagenet.harness.report.common import ReportError
from hpc_imagenet.harness.report.words import Words

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference"  # published numbers and cited links
words = Words(HERE / "text")  # this study's words, read by its sections alone


def load_reference(ref_dir: Path = REFERENCE) -> Tuple[dict, dict]:
    """(published numbers, cited links) from REF_DIR."""
    try:
        pub = json.loads((ref_dir / "published_resnet50.json").read_text())
        links = json.loads((ref_dir / "links.json").read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot read the reference data in {ref_dir} ({e}); restore "
                          "studies/published_model/reference/ from git") from None
    return pub, links
