"""Step 3 of the data flow: decoding backends, every one registered here and nowhere else.

``--data-backend NAME`` picks one. A backend is one of two kinds:

- a per-sample transform, ``transform(train, image_size, resize_size=None, crop_scale=CROP_SCALE,
  augment=NONE)`` -> ``Transform`` (encoded bytes -> one CHW image; validation resizes the short
  side to RESIZE_SIZE, by default image_size * 256 / 224, and centre-crops IMAGE_SIZE; AUGMENT:
  the policy, erasing and interpolation of :mod:`.augment`): the loader runs it in DataLoader workers
  on each sample its sampler chooses
  (``pil``, ``baseline``, ``fast``, ``device``);
- a batch backend, ``loaders(cfg, samples, train_sampler, val_sampler, rank, device)`` -> (train,
  val): it decodes whole batches itself, over the same samplers (``dali``).

Which file holds what: :mod:`.base` (the transform signature, ImageNet's constants), :mod:`.augment`
(the per-image augmentation policies and random erasing), :mod:`.pil`
(``pil``, ``baseline``), :mod:`.jpeg` (JPEG header, row and region decoding; the C region decoder
``_jpeg_region.c`` beside it), :mod:`.fast`, :mod:`.device`, :mod:`.dali`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data.decode import dali, device, fast, jpeg, pil
from hpc_imagenet.imagenet.data.decode.augment import NONE, Augmentation
from hpc_imagenet.imagenet.data.decode.base import CROP_SCALE, Transform


@dataclass(frozen=True)
class Backend:
    """A registered backend: exactly one of ``transform`` and ``loaders`` is set."""
    transform: Optional[Callable[..., Transform]] = None
    loaders: Optional[Callable] = None

    @property
    def per_sample(self) -> bool:
        """Whether the loader decodes each sample (and seeds its augmentation from the sampler)."""
        return self.transform is not None


BACKENDS: Dict[str, Backend] = {
    "pil": Backend(transform=pil.pil_backend),
    "baseline": Backend(transform=pil.baseline_backend),
    "fast": Backend(transform=fast.fast_backend),
    "device": Backend(transform=device.device_backend),
    "dali": Backend(loaders=dali.dali_loaders),
}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise DataError(f"unknown --data-backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]


def decoder_in_use(name: str) -> Dict[str, object]:
    """For run.json: the backend and the decoder it really uses in this environment (the fast
    backend's C region decoder, the device backend's library)."""
    used: Dict[str, object] = {"backend": name}
    if name == "fast":
        used["region_decoder"] = jpeg.region_decoder_available()
    elif name == "device":
        used["device_decoder"] = device.decoder_name()
    return used


def per_sample_names() -> List[str]:
    """The backends a dataset can apply sample by sample (what the per-sample benchmarks compare)."""
    return sorted(name for name, backend in BACKENDS.items() if backend.per_sample)


def transform(name: str, train: bool, image_size: int, resize_size: Optional[int] = None,
              crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE) -> Transform:
    """The per-sample transform of backend NAME; DataError for a batch backend (dali)."""
    backend = get_backend(name)
    if not backend.per_sample:
        raise DataError(f"--data-backend {name} decodes whole batches, not single samples; "
                        f"choose one of: {', '.join(per_sample_names())}")
    return backend.transform(train, image_size, resize_size, crop_scale, augment)
