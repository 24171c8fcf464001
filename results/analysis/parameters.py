"""Parameter counts of torchvision models: the gradient size the scaling model all-reduces."""
from __future__ import annotations

import functools
import logging
from typing import Optional

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)  # the report asks for resnet50's several times; building it takes seconds
def parameter_count(arch: str, num_classes: int = 1000) -> Optional[int]:
    """Trainable parameters of a torchvision model (= gradient elements all-reduced per step)."""
    try:
        import torchvision
        model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
        return sum(t.numel() for t in model.parameters() if t.requires_grad)
    except Exception as e:  # an arch outside torchvision: the model just lacks this input
        log.warning("cannot count parameters of %s: %s", arch, e)
        return None
