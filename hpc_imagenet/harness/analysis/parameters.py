"""Parameter counts of torchvision models: the gradient size the scaling model all-reduces.

The ResNets' counts are cited in ``results/reference/parameters.json``, so the report needs no torch;
any other model is built with torchvision (where torch is installed) and counted.
"""
from __future__ import annotations

import functools
import json
import logging
from typing import Optional

from hpc_imagenet.harness.core.records import REFERENCE_DIR

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def cited_counts() -> dict:
    return json.loads((REFERENCE_DIR / "parameters.json").read_text())


@functools.lru_cache(maxsize=None)  # building a model takes seconds
def parameter_count(arch: str, num_classes: int = 1000) -> Optional[int]:
    """Trainable parameters of a torchvision model (= gradient elements all-reduced per step)."""
    cited = cited_counts().get(arch)
    if isinstance(cited, int) and num_classes == 1000:
        return cited
    try:
        import torchvision
        model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
        return sum(t.numel() for t in model.parameters() if t.requires_grad)
    except Exception as e:  # an arch outside torchvision, or no torch: the model just lacks this input
        log.warning("cannot count parameters of %s: %s", arch, e)
        return None
