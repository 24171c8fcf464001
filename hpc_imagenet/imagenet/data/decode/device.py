"""The ``device`` data backend: JPEG bytes through the loader, decoding on the training device.

Loader workers only read each image's bytes (from a file or a shard) and draw its augmentation (the
crop box from the JPEG header, with the ``fast`` backend's rule and distribution, and the flip); the
batch crosses the worker pipe
as compressed bytes (~110 KB an ImageNet photo instead of 150 KB of pixels). The training process
then decodes the whole batch in one call on its device and crops, flips and resizes each image
there. It is for nodes with few CPU cores per GPU, where CPU decoding cannot keep up;
:class:`hpc_imagenet.imagenet.data.normalize.DeviceNormalizer` calls :meth:`EncodedBatch.decode`, so the training loop
is
unchanged. The augmentation policy and random erasing (:mod:`.augment`) run there too, per image
after its crop, from a seed the worker draws from the sample's seeded stream (on a GPU, AugMix's
mixing weights come from the device's generator).

The decoder is TorchCodec's ``decode_jpeg`` where TorchCodec is installed (one batched nvJPEG call
on a GPU, libjpeg-turbo on a CPU), else torchvision's (deprecated since torchvision 0.29 in favour
of TorchCodec). EXIF orientation: every backend trains on the stored frame, ignoring the EXIF
Orientation tag, as pytorch/examples' PIL loader does, and the crop boxes are drawn from that frame.
TorchCodec always applies the tag, so its output is turned back to the stored frame here (the
worker reads the tag with PIL, which parses only the header).
"""
from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision.transforms.v2 import functional as TF

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data.decode.augment import NONE, Augmentation, uint8_ops
from hpc_imagenet.imagenet.data.decode.base import CROP_SCALE, resample_options, val_resize
from hpc_imagenet.imagenet.data.decode.fast import FastTrain, resized_hw
from hpc_imagenet.imagenet.data.decode.jpeg import JpegFrame, jpeg_frame

try:
    from torchcodec.decoders import decode_jpeg as _torchcodec_decode_jpeg
except (ImportError, OSError, RuntimeError):  # not installed, or its native library does not load here
    _torchcodec_decode_jpeg = None

EXIF_ORIENTATION = 0x0112
# EXIF orientation -> how to turn the displayed image (what TorchCodec returns) back into the stored
# frame: (transpose H and W first, then flip these dims). 1 is the stored frame itself.
_TO_STORED = {2: (False, (-1,)), 3: (False, (-2, -1)), 4: (False, (-2,)), 5: (True, ()),
              6: (True, (-2,)), 7: (True, (-2, -1)), 8: (True, (-1,))}


def decoder_name() -> str:
    """Which library the device backend decodes with in this environment."""
    return "torchcodec" if _torchcodec_decode_jpeg is not None else "torchvision"


VAL = -1  # a box row whose height is VAL asks for the validation transform; its first column is the resize


class EncodedImage(NamedTuple):
    """One sample: the image's bytes, its transform (top, left, height, width, flip, output size, the
    augmentation's seed or -1, EXIF orientation), its name (a path, or a shard and index) for
    messages, and the augmentation settings."""

    data: torch.Tensor
    box: torch.Tensor
    path: str
    augment: Augmentation = NONE


@dataclass
class EncodedBatch:
    """A batch of compressed images and their transforms, decoded where the model runs."""

    data: List[torch.Tensor]
    boxes: torch.Tensor  # int64 [N, 8], stays on the host: reading it is no device sync
    paths: List[str]
    augment: Augmentation = NONE

    def __len__(self) -> int:
        return len(self.data)

    def pin_memory(self, device=None) -> "EncodedBatch":
        # the DataLoader's pinning thread calls this: host-to-GPU copies of the bytes can then overlap
        return EncodedBatch([d.pin_memory() for d in self.data], self.boxes, self.paths, self.augment)

    def decode(self, device: torch.device) -> torch.Tensor:
        """uint8 NCHW images on DEVICE, each transformed as its box row says."""
        try:
            images = _decode_jpegs(self.data, device, self.boxes[:, -1].tolist())
        except RuntimeError as e:
            raise DataError(f"cannot decode a JPEG of this batch on {device} ({str(e).splitlines()[0]}); files: "
                            f"{', '.join(self.paths[:3])}{'...' if len(self.paths) > 3 else ''}; run with "
                            "--data-backend fast to find the broken file") from None
        mode, ops = self.augment.interpolation, _ops(self.augment)
        return torch.stack([_augmented(_transform(im, row, mode), row[6], ops)
                            for im, row in zip(images, self.boxes.tolist())])


@functools.lru_cache(maxsize=None)
def _ops(augment: Augmentation):
    return uint8_ops(augment)


def _augmented(image: torch.Tensor, seed: int, ops) -> torch.Tensor:
    """IMAGE through OPS with torch's CPU generator seeded with SEED (-1: no augmentation)."""
    if ops is None or seed < 0:
        return image
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return ops(image)


def _decode_jpegs(data: List[torch.Tensor], device: torch.device, orientations: Sequence[int]) -> List[torch.Tensor]:
    """uint8 CHW RGB images of the stored frames, decoded in one call on DEVICE."""
    if _torchcodec_decode_jpeg is None:
        from torchvision.io import ImageReadMode, decode_jpeg  # deprecated; warns on every call

        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    images = _torchcodec_decode_jpeg(list(data), mode="RGB", device=device)
    return [to_stored_frame(im, o) for im, o in zip(images, orientations)]


def to_stored_frame(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """A CHW image displayed per EXIF ORIENTATION, turned back into the frame the JPEG stores."""
    transpose, dims = _TO_STORED.get(orientation, (False, ()))
    image = image.transpose(-2, -1) if transpose else image
    return image.flip(dims) if dims else image


def exif_orientation(buf: bytes) -> int:
    """The EXIF Orientation tag of a JPEG (1 where absent or unreadable); PIL reads the header only."""
    try:
        with Image.open(io.BytesIO(buf)) as im:
            value = im.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # a broken header is the decoder's to report, with the file's name
        return 1
    return value if value in _TO_STORED else 1


def _transform(image: torch.Tensor, row: Sequence[int], mode: str = "bilinear") -> torch.Tensor:
    top, left, height, width, flip, size, _seed, _orientation = row
    if height == VAL:  # Resize(top: the short side's size) then CenterCrop(size), as the others
        return TF.center_crop(_resize(image, *resized_hw(*image.shape[-2:], top), mode), [size, size])
    crop = image[:, top:top + height, left:left + width]
    return _resize(crop.flip(-1) if flip else crop, size, size, mode)


def _resize(image: torch.Tensor, height: int, width: int, mode: str = "bilinear") -> torch.Tensor:
    """Antialiased bilinear (or bicubic, or nearest) resize of a uint8 CHW image; through float, which
    every device supports."""
    out = torch.nn.functional.interpolate(image.unsqueeze(0).float(), size=(height, width), mode=mode,
                                          **resample_options(mode))
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


class EncodedTrain:
    """bytes -> bytes + a RandomResizedCrop box and flip drawn from the JPEG header, and the seed of
    the augmentation the device applies after the crop (when there is one)."""

    def __init__(self, image_size: int, crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE):
        self.size, self.crop_scale, self.augment = image_size, crop_scale, augment
        self.augments = augment.active

    def __call__(self, buf: bytes, name: str = "") -> EncodedImage:
        buf, frame = _device_jpeg(buf)
        (top, left, h, w), flip = FastTrain.sample(frame.height, frame.width, self.crop_scale,
                                                self.augment.crop_ratio)
        seed = int(torch.randint(0, 2**62, ())) if self.augments else -1
        return _encoded(buf, [top, left, h, w, int(flip), self.size, seed], name, self.augment)


class EncodedVal:
    """bytes -> bytes, for Resize(resize_size, default size*256/224) + CenterCrop on the device."""

    def __init__(self, image_size: int, resize_size: Optional[int] = None, interpolation: str = "bilinear"):
        self.size = image_size
        self.resize = resize_size or val_resize(image_size)
        self.augment = Augmentation(interpolation=interpolation)

    def __call__(self, buf: bytes, name: str = "") -> EncodedImage:
        buf, _ = _device_jpeg(buf)
        return _encoded(buf, [self.resize, 0, VAL, VAL, 0, self.size, -1], name, self.augment)


def _device_jpeg(buf: bytes) -> Tuple[bytes, JpegFrame]:
    """BUF and its JPEG frame, or, for an image the device decoders may not read, an RGB JPEG of it
    made here in the loader worker: ImageNet's train split has one PNG under a .JPEG name and 22
    CMYK JPEGs (nvJPEG decodes neither); a few re-encodes an epoch cost nothing. Undecodable
    bytes raise, and ImageFiles turns that into the bad-image error (or a skip)."""
    frame = jpeg_frame(buf)
    if frame is not None and buf[frame.height_offset + 4] in (1, 3):  # grey or YCbCr, not CMYK/YCCK
        return buf, frame
    out = io.BytesIO()
    with Image.open(io.BytesIO(buf)) as im:
        im.convert("RGB").save(out, "JPEG", quality=95)
    return out.getvalue(), jpeg_frame(out.getvalue())


def _encoded(buf: bytes, row: List[int], path: str, augment: Augmentation) -> EncodedImage:
    """The sample; ROW gets the EXIF orientation as its last column (read only where it is undone)."""
    orientation = exif_orientation(buf) if _torchcodec_decode_jpeg is not None else 1
    return EncodedImage(torch.frombuffer(bytearray(buf), dtype=torch.uint8), torch.tensor([*row, orientation]), path,
                        augment)


def device_backend(train: bool, image_size: int, resize_size: Optional[int] = None,
                   crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE):
    if train:
        return EncodedTrain(image_size, crop_scale, augment)
    return EncodedVal(image_size, resize_size, augment.interpolation)


def collate(batch):
    """default_collate, except that encoded images stay a list of byte tensors (their sizes differ)."""
    if batch and isinstance(batch[0][0], EncodedImage):
        images = [item[0] for item in batch]
        return (EncodedBatch([i.data for i in images], torch.stack([i.box for i in images]),
                             [i.path for i in images], images[0].augment),
                default_collate([item[1] for item in batch]))
    return default_collate(batch)
