"""``--data-backend dali``: NVIDIA DALI decodes and augments the batch, on the GPU where there is one.

For GPU nodes with few CPU cores per GPU. Needs the ``nvidia-dali-cuda130`` (CUDA 13) or
``nvidia-dali-cuda120`` (CUDA 12) package; without it the run stops with one line naming them.

What runs where:

- **Which samples, in which order**: our own samplers, as for every other backend
  (:class:`hpc_imagenet.imagenet.data.samplers.ResumableSampler` for training,
  :class:`hpc_imagenet.imagenet.data.samplers.ShardSampler` for
  validation). A parallel ``fn.external_source`` reads each chosen sample's encoded bytes from the
  dataset (an ImageFolder file or a tar shard) in Python worker processes. So the shuffle, the
  split across ranks, the mid-epoch resume position and exact validation (every image once, no
  padding, a short last batch) are the same as with ``fast``. DALI's own readers shuffle through a
  buffer and pad the last batch, which would change all four.
- **Training**: ``fn.decoders.image_random_crop`` draws RandomResizedCrop's box (area 8-100 %,
  aspect 3/4-4/3, 10 tries, then a centred fallback) and decodes only that region (nvJPEG's
  region-of-interest decode on a GPU: ``device="mixed"``); then an antialiased linear resize to
  size x size and a horizontal flip with probability 1/2 (torchvision's statistics).
- **Augmentation** (``--auto-augment``, ``--random-erase``): DALI's own ``auto_aug`` module
  (``trivial_augment_wide``, ``rand_augment``, ``auto_augment_image_net``: torchvision's operations,
  31 magnitude bins and the ImageNet policy), which needs a pipeline with conditionals; AugMix and
  the CIFAR-10 and SVHN policies are not in DALI, and the settings refuse them. Erasing is
  ``fn.erase`` of one rectangle drawn as torchvision's (area 2-33 %, aspect 0.3-3.3, placed
  uniformly) in a single try, clamped to the image where torchvision would try again, filled with
  the mean pixel.
- **Validation**: full decode, shorter side resized to the validation resize size (default
  size*256/224), centre crop.
- **Output**: uint8 NHWC from DALI, handed to the training loop as an NCHW view with channels-last
  strides (no transpose: the channels-last model takes it as is) on the training device;
  :class:`hpc_imagenet.imagenet.data.normalize.DeviceNormalizer` converts and normalises it like every other batch.

One pipeline serves every epoch of a loader: its reader processes ask their own copy of the
sampler for each epoch's indices, and an epoch ends after --steps-per-epoch (--val-steps) batches,
so nothing is left queued. It is rebuilt only for a resumed or abandoned epoch, seeded from seed,
epoch and rank; a validation loader, whose sampler has no epochs, goes on where its last pass ended. Its
workers are spawned where CUDA is initialised in the training process (a forked CUDA process is unusable), and
forked otherwise: the CPU operators' pipeline then starts in ~0.1 s instead of ~4 s, every worker re-importing
torch. Augmentation draws come from DALI's generator, so a resumed
run reads the same samples in the same order but draws other crops than an uninterrupted one.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data.sources import FolderIndex
from hpc_imagenet.imagenet.data.decode.augment import MEAN_PIXEL, NONE, Augmentation
from hpc_imagenet.imagenet.data.decode.base import CROP_SCALE, val_resize

PACKAGES = "nvidia-dali-cuda130 (CUDA 13) or nvidia-dali-cuda120 (CUDA 12)"
PREFETCH = 2  # batches DALI prepares ahead of the one being trained on


class DaliUnavailable(ImportError):
    """DALI is not installed; the message is the one line to show."""


def require_dali():
    """The nvidia.dali package, or DaliUnavailable naming the pip packages that provide it."""
    try:
        import nvidia.dali
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401
    except ImportError as e:
        raise DaliUnavailable(f"--data-backend dali needs NVIDIA DALI ({e}); install it with pip install "
                              f"{PACKAGES}, or use --data-backend fast or device") from None
    return nvidia.dali


def epoch_batches(samples: int, batch_size: int, drop_last: bool, max_batches: int) -> int:
    """Batches in an epoch of SAMPLES: whole batches only when DROP_LAST, at most MAX_BATCHES (0: all)."""
    n = samples // batch_size if drop_last else -(-samples // batch_size)
    return min(n, max_batches) if max_batches else n


class EpochSource:
    """Picklable batch callback for DALI's parallel external source.

    It runs in DALI's worker processes, which live as long as the loader: for each DALI epoch it
    asks its own copy of the sampler for that epoch's indices (the very code the other backends
    use), so the pipeline never has to be rebuilt. READ maps a dataset index to (bytes, class); a
    shard file it opens stays open in that worker. The first epoch may start part-way (a resumed
    run), and an epoch ends after MAX_BATCHES when given (--steps-per-epoch, --val-steps).
    """

    def __init__(self, read: Callable[[int], Tuple[bytes, int]], sampler, batch_size: int, drop_last: bool,
                 max_batches: int, first_epoch: int, first_skip: int):
        self.read, self.sampler, self.batch_size = read, sampler, batch_size
        self.drop_last, self.max_batches = drop_last, max_batches
        self.first_epoch, self.first_skip = first_epoch, first_skip
        self._cached: Tuple[int, Optional[np.ndarray]] = (-1, None)

    def _indices(self, epoch_idx: int) -> np.ndarray:
        if self._cached[0] != epoch_idx:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.first_epoch + epoch_idx)
            indices = np.fromiter(iter(self.sampler), dtype=np.int64)
            skip = self.first_skip if epoch_idx == 0 else 0
            end = epoch_batches(len(indices), self.batch_size, self.drop_last, self.max_batches) * self.batch_size
            self._cached = (epoch_idx, indices[skip * self.batch_size:end])
        return self._cached[1]

    def __call__(self, batch_info) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        indices = self._indices(batch_info.epoch_idx)
        chosen = indices[batch_info.iteration * self.batch_size:(batch_info.iteration + 1) * self.batch_size]
        if len(chosen) == 0:
            raise StopIteration
        images, labels = [], []
        for i in chosen:
            data, label = self.read(int(i))
            images.append(np.frombuffer(data, dtype=np.uint8))
            labels.append(np.array([label], dtype=np.int64))
        return images, labels


def _interp(mode: str):
    from nvidia.dali import types

    return {"bilinear": types.INTERP_LINEAR, "bicubic": types.INTERP_CUBIC, "nearest": types.INTERP_NN}[mode]


def _graph(source: EpochSource, train: bool, image_size: int, gpu: bool, resize_size: Optional[int] = None,
           crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE):
    """The DALI operators of one epoch (called inside a pipeline definition)."""
    from nvidia.dali import fn, types

    jpegs, labels = fn.external_source(source=source, num_outputs=2, batch=True, batch_info=True, parallel=True,
                                       dtype=[types.UINT8, types.INT64])
    decoder = "mixed" if gpu else "cpu"
    interp = _interp(augment.interpolation)
    if train:
        images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB,
                                               random_area=list(crop_scale),
                                               random_aspect_ratio=list(augment.crop_ratio),
                                               num_attempts=10, adjust_orientation=False)
        images = fn.resize(images, size=[image_size, image_size], interp_type=interp, antialias=True)
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
        images = _augmented(images, augment, image_size)
    else:
        # the stored frame, EXIF orientation ignored, as every other backend (see decode/device.py)
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, adjust_orientation=False)
        images = fn.resize(images, resize_shorter=resize_size or val_resize(image_size), interp_type=interp,
                           antialias=True)
        images = fn.crop(images, crop=[image_size, image_size])
    return images, labels


def _augmented(images, augment: Augmentation, size: int):
    """The --auto-augment policy and --random-erase, from DALI's auto_aug module and fn.erase."""
    from nvidia.dali.auto_aug import auto_augment, rand_augment, trivial_augment

    interp = _interp("nearest" if augment.interpolation == "nearest" else "bilinear")  # warp_affine has no cubic
    shape = (size, size)
    # DALI's own policies call its deprecated experimental ops, and it forces their warnings on: kept
    # out of the user's log by recording them here
    with warnings.catch_warnings(record=True):
        if augment.policy == "ta_wide":
            images = trivial_augment.trivial_augment_wide(images, shape=shape, interp_type=interp)
        elif augment.policy == "ra":
            images = rand_augment.rand_augment(images, n=2, m=augment.magnitude, shape=shape, interp_type=interp)
        elif augment.policy == "imagenet":
            images = auto_augment.auto_augment_image_net(images, shape=shape, interp_type=interp)
    return _erased(images, augment.erase) if augment.erase > 0 else images


def _erased(images, probability: float):
    """One rectangle per image, with PROBABILITY, drawn as torchvision's RandomErasing in one try."""
    from nvidia.dali import fn
    from nvidia.dali import math as dali_math

    ratio = dali_math.exp(fn.random.uniform(range=[math.log(0.3), math.log(3.3)]))
    area = fn.random.uniform(range=[0.02, 0.33])
    height = dali_math.min(dali_math.sqrt(area * ratio), 1.0)
    width = dali_math.min(dali_math.sqrt(area / ratio), 1.0)
    top = fn.random.uniform(range=[0.0, 1.0]) * (1.0 - height)
    left = fn.random.uniform(range=[0.0, 1.0]) * (1.0 - width)
    erase = fn.random.coin_flip(probability=probability)  # 0: a rectangle of no size
    return fn.erase(images, anchor=fn.stack(top, left), shape=fn.stack(height * erase, width * erase),
                    axis_names="HW", normalized=True, fill_value=MEAN_PIXEL)


def build_pipeline(source: EpochSource, train: bool, image_size: int, device: torch.device, workers: int,
                   seed: int, resize_size: Optional[int] = None, crop_scale: Tuple[float, float] = CROP_SCALE,
                   augment: Augmentation = NONE):
    """A built DALI pipeline for one epoch of SOURCE (CPU operators when DEVICE is not a GPU)."""
    dali = require_dali()
    gpu = device.type == "cuda"

    # the auto_aug policies choose operations with DALI conditionals, which only pipeline_def enables
    @dali.pipeline_def(enable_conditionals=augment.policy is not None)
    def epoch():
        return _graph(source, train, image_size, gpu, resize_size, crop_scale, augment)

    pipe = epoch(batch_size=source.batch_size, num_threads=max(1, workers), device_id=device.index if gpu else None,
                 seed=seed, py_num_workers=max(1, workers), py_start_method=worker_start_method(),
                 prefetch_queue_depth=PREFETCH,
                 exec_dynamic=True)
    pipe.build()
    return pipe


def worker_start_method() -> str:
    """How DALI starts its reader processes: spawned once CUDA is initialised here, else forked (DALI's default)."""
    return "spawn" if torch.cuda.is_initialized() else "fork"


def _to_torch(tensor_list, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A DALI output batch as a torch tensor on DEVICE.

    GPU outputs (the images of a mixed pipeline) are copied device to device on the current stream;
    CPU outputs (the labels, any output of a CPU pipeline) are read on the host, then moved. Handing
    a CPU output to feed_ndarray with a CUDA tensor would make DALI write to a device pointer from
    the host.
    """
    from nvidia.dali.tensors import TensorListCPU

    dense = tensor_list.as_tensor()
    if isinstance(tensor_list, TensorListCPU):
        return torch.from_numpy(np.array(dense)).to(device, non_blocking=True)
    from nvidia.dali.plugin.pytorch import feed_ndarray

    out = torch.empty(dense.shape(), dtype=dtype, device=device)
    feed_ndarray(dense, out, cuda_stream=torch.cuda.current_stream(device))
    return out


def _run(pipe):

    try:
        return pipe.run()
    except RuntimeError as e:  # DALI reports a broken file as a RuntimeError naming the operator
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise DataError(f"DALI could not decode a sample of this batch ({reason[:300]}); find the file with "
                        "--data-backend fast, which names it, then replace or remove it") from None


class FileReader:
    """(bytes, class) of sample i of a source (an ImageFolder or shard index from
    :mod:`hpc_imagenet.imagenet.data.sources`, or a list of (path, class)); picklable for DALI's workers."""

    def __init__(self, source):
        self.source = source if hasattr(source, "read") else FolderIndex.from_samples(source)

    def __call__(self, index: int) -> Tuple[bytes, int]:
        return self.source.read(index), self.source.target(index)


class DaliLoader:
    """A DataLoader stand-in the training loop iterates: len(), iter(), .sampler.

    Batches are (uint8 NCHW images with channels-last strides, int64 labels), both on DEVICE. One
    DALI pipeline (and its reader processes) serves every epoch; it is rebuilt only when the loop
    does not go on where the last epoch ended (a resumed run, an epoch left part-way).
    """

    def __init__(self, read: Callable[[int], Tuple[bytes, int]], sampler, batch_size: int, train: bool,
                 image_size: int, device: torch.device, workers: int, seed: Optional[int], rank: int,
                 max_batches: int = 0, resize_size: Optional[int] = None,
                 crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE):
        require_dali()
        self.resize_size, self.crop_scale, self.augment = resize_size, crop_scale, augment
        self.read, self.sampler, self.batch_size = read, sampler, batch_size
        self.train, self.image_size, self.device = train, image_size, device
        self.workers, self.seed, self.rank, self.max_batches = workers, seed, rank, max_batches
        self.pipe, self.source = None, None
        self.next_epoch, self.pending = None, 0  # where the pipeline stands

    def __len__(self) -> int:
        return epoch_batches(len(self.sampler), self.batch_size, self.train, self.max_batches)

    def _seed(self, epoch: int) -> int:
        base = self.seed if self.seed is not None else int.from_bytes(os.urandom(3), "little")
        return (base * 100_003 + epoch * 1_009 + self.rank) % (2 ** 31)

    def _start(self, epoch: int, skip: int) -> None:
        self.close()
        self.source = EpochSource(self.read, self.sampler, self.batch_size, self.train, self.max_batches, epoch, skip)
        self.pipe = build_pipeline(self.source, self.train, self.image_size, self.device, self.workers,
                                   self._seed(epoch), self.resize_size, self.crop_scale, self.augment)

    def _end_epoch(self) -> None:
        """The pipeline has reached the end of the epoch just consumed: take its StopIteration, reset."""
        try:
            _run(self.pipe)
        except StopIteration:
            self.pipe.reset()
            return
        raise RuntimeError("DALI pipeline produced more batches than the epoch has")

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        epoch = getattr(self.sampler, "epoch", None)  # set by hpc_imagenet.imagenet.data.loader.set_epoch
        if epoch is None:  # a sampler without epochs (validation's): each pass goes on where the last ended
            epoch = self.next_epoch or 0
        skip = getattr(self.sampler, "start_index", 0) // self.batch_size
        if hasattr(self.sampler, "start_index"):
            self.sampler.start_index = 0  # consumed, as ResumableSampler.__iter__ does
        if self.pipe is None or skip or self.pending or epoch != self.next_epoch:
            self._start(epoch, skip)
        else:
            self._end_epoch()
        self.pending = len(self) - skip
        self.next_epoch = epoch + 1
        while self.pending > 0:
            images, labels = _run(self.pipe)
            self.pending -= 1
            nhwc = _to_torch(images, self.device, torch.uint8)
            yield nhwc.permute(0, 3, 1, 2), _to_torch(labels, self.device, torch.int64).view(-1)

    def close(self) -> None:
        """Stop the pipeline and its reader processes."""
        self.pipe, self.source = None, None

    def __del__(self):
        self.close()


def dali_loaders(cfg, samples, train_sampler, val_sampler, rank: int, device: torch.device):
    """Train and val loaders of the dali backend, over the same samplers as the other backends."""
    try:
        require_dali()
    except DaliUnavailable as e:
        raise DataError(str(e)) from None
    # --skip-bad-images with dali is refused by the settings' validation, before anything starts.
    data = cfg.data
    make = lambda split, sampler, train, size, max_batches, resize=None: DaliLoader(  # noqa: E731
        FileReader(samples[split]), sampler, cfg.batch.per_process, train, size, device,
        cfg.batch.workers, cfg.run.seed, rank, max_batches, resize,
        data.train_crop_scale if train else CROP_SCALE,
        Augmentation.of(data) if train else Augmentation.for_val(data))
    # --steps-per-epoch counts optimizer steps, each of accum_steps micro-batches
    return (make("train", train_sampler, True, data.image_size, data.steps_per_epoch * cfg.batch.accum_steps),
            make("val", val_sampler, False, data.val_crop_size or data.image_size, data.val_steps,
                 data.val_resize_size))
