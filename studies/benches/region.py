"""Per-core cost of decoding only a crop box of a JPEG: our C region decoder (libjpeg-turbo's
``jpeg_skip_scanlines`` + ``jpeg_crop_scanline``, hpc_imagenet/imagenet/data/decode/_jpeg_region.c) against
nvImageCodec's
CPU decoder (``nvidia-nvimgcodec``, installed with DALI; ``CodeStream.get_sub_code_stream(region=)``).
``python -m studies.benches region``.

Both decode the same boxes, drawn as training draws them (RandomResizedCrop's scale and ratio), from
the same bytes, one image after the other in lockstep, on one thread each (nvImageCodec gets
``max_num_cpu_threads=1``), timed by the process's CPU clock so a helper thread is counted too.
The first pass checks that both give the same pixels. Only the decode is timed: no resize, no
tensor conversion beyond what each decoder returns.
"""
from __future__ import annotations

import io
import logging
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import RandomResizedCrop

from hpc_imagenet.imagenet.data.decode import jpeg
from hpc_imagenet.harness.runners.common import BenchError, add_flags, jpeg_root, new_sweep
from hpc_imagenet.harness.runners.pipeline_bench import Measurement, summarize
from hpc_imagenet.harness.runners.procs import torch_threads

log = logging.getLogger(__name__)

Box = Tuple[int, int, int, int]  # top, left, height, width
Decoder = Callable[[bytes, Box], np.ndarray]
REFERENCE = "c-libjpeg-turbo"


def c_decoder() -> Optional[Decoder]:
    """The engine's public entry to its C region decoder (a zero-copy tensor view, as the loader gets it)."""
    if not jpeg.region_decoder_available():
        return None

    def decode(buf: bytes, box: Box) -> np.ndarray:
        pixels = jpeg.decode_box(buf, box)
        if pixels is None:  # the engine falls back to whole rows here; a bench of the C decoder cannot
            raise BenchError("the C region decoder could not decode a generated JPEG")
        return pixels.numpy()
    return decode


def nvimgcodec_decoder() -> Optional[Decoder]:
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                                 backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    params = nvimgcodec.DecodeParams(apply_exif_orientation=False)  # raw frame, as the C decoder

    def decode(buf: bytes, box: Box) -> np.ndarray:
        top, left, h, w = box
        region = nvimgcodec.CodeStream(buf).get_sub_code_stream(region=nvimgcodec.Region(top, left, top + h, left + w))
        return np.asarray(decoder.decode(region, params=params).cpu())
    return decode


def training_boxes(sizes: Sequence[Tuple[int, int]], seed: int) -> List[Box]:
    """One RandomResizedCrop box per (width, height), as the fast backend draws them."""
    torch.manual_seed(seed)
    return [tuple(RandomResizedCrop.get_params(torch.empty(1, height, width), (0.08, 1.0), (3 / 4, 4 / 3)))
            for width, height in sizes]


def jpeg_size(buf: bytes) -> Tuple[int, int]:
    with Image.open(io.BytesIO(buf)) as im:
        return im.size


def measure(decoders: Dict[str, Decoder], bufs: List[bytes], boxes: List[Box], rounds: int) -> List[Measurement]:
    """CPU seconds of each decoder over all images, per round (decoders alternate image by image)."""
    for name, decode in decoders.items():  # same pixels first: a faster wrong decoder is no result
        for buf, box in zip(bufs, boxes):
            mine, ref = decode(buf, box), decoders[REFERENCE](buf, box)
            if mine.shape != ref.shape or np.abs(mine.astype(int) - ref.astype(int)).max() > 0:
                raise BenchError(f"{name} and {REFERENCE} decode box {box} differently")
    out = []
    with torch_threads(1):
        for r in range(rounds):
            spent = dict.fromkeys(decoders, 0.0)
            for buf, box in zip(bufs, boxes):
                for name, decode in decoders.items():
                    t0 = time.process_time()
                    decode(buf, box)
                    spent[name] += time.process_time() - t0
            out += [Measurement(name, "train", 0, len(bufs), s, s, r) for name, s in spent.items()]
    return out


def add_parser(sub, common) -> None:
    r = sub.add_parser("region", parents=[common], help="per-core cost of decoding a crop box: the C region "
                       "decoder vs nvImageCodec's CPU decoder (lockstep, same boxes)")
    r.add_argument("--data", help="ImageFolder root with train/ (default: generated ImageNet-like 500x375 JPEGs)")
    add_flags(r, images=256, rounds=5)


def run(args) -> List[dict]:
    decoders = {name: make() for name, make in ((REFERENCE, c_decoder), ("nvimgcodec-cpu", nvimgcodec_decoder))}
    missing = [name for name, d in decoders.items() if d is None]
    if missing:
        raise BenchError(f"cannot compare: {', '.join(missing)} not available (build the C decoder with "
                           "`pip install -e .`; nvImageCodec comes with DALI: pip install '.[dali-cu13]')")
    root = jpeg_root(args.data, 4, -(-args.images // 4))
    files = sorted(p for p in (root / "train").rglob("*") if p.is_file())[:args.images]
    bufs = [p.read_bytes() for p in files]
    boxes = training_boxes([jpeg_size(b) for b in bufs], seed=0)
    # medians over rounds; the ratio is the median of per-round ratios to the C decoder
    rows = summarize(measure(decoders, bufs, boxes, args.rounds), REFERENCE)
    sweep = new_sweep("region", args)
    for row in rows:
        point = {"decoder": row["backend"], "images": len(bufs), "boxes": "RandomResizedCrop(0.08-1, 3/4-4/3)",
                 "data": str(args.data) if args.data else "generated 500x375 JPEGs "
                                                          "(hpc_imagenet/harness/runners/jpegs.py)"}
        metrics = {k: row[k] for k in ("images_per_cpu_s", "cpu_ms_per_image", "rounds", "ratio_per_core",
                                       "ratio_min", "ratio_max")}
        sweep.add(point, metrics, kind="region_decode")
        log.info("    %-16s %.0f images/s per core, %.3f CPU ms/image, %.2fx the C decoder (%.2f-%.2f)",
                 row["backend"], row["images_per_cpu_s"], row["cpu_ms_per_image"], row["ratio_per_core"],
                 row["ratio_min"], row["ratio_max"])
    return sweep.done
