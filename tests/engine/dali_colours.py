"""Solid-colour JPEG datasets for the DALI tests (CPU here, CUDA in test_gpu.py, shards in
test_shards.py): each JPEG is one flat colour that encodes its sample id, so a decoded, cropped and
resized batch still says which samples it holds."""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet.data import samplers, scan
from hpc_imagenet.imagenet.data.decode import dali
from hpc_imagenet.imagenet.data.loader import set_epoch

CPU = torch.device("cpu")
TRAIN, VAL = 24, 11  # samples; 11 val images over 2 ranks and batch 4: 6 + 5, last batches of 2 and 1


def _has_dali() -> bool:
    try:
        dali.require_dali()
        return True
    except dali.DaliUnavailable:
        return False


needs_dali = pytest.mark.skipif(not _has_dali(), reason="NVIDIA DALI not installed (pip install nvidia-dali-cuda130)")


def _colour(sample_id: int):
    return (8 * sample_id + 20, 235 - 8 * sample_id, 128)


def decode_id(image: torch.Tensor) -> int:
    red = image[0].float().mean().item()
    return round((red - 20) / 8)


def colour_dataset(root: Path) -> Path:
    """train/ and val/ with two classes; sample i of a split is flat colour i (class = i % 2)."""
    for split, count in (("train", TRAIN), ("val", VAL)):
        for i in range(count):
            folder = root / split / f"class_{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            # names sort in id order within a class folder; scan order is class 0's then class 1's
            Image.new("RGB", (48, 40), _colour(i)).save(folder / f"img_{i:03d}.jpg", quality=95)
    return root


def ids_in_scan_order(samples) -> List[int]:
    return [int(Path(p).stem.split("_")[1]) for p, _ in samples]


def dali_loader(samples, sampler, train: bool, device, batch: int = 4, max_batches: int = 0):
    return dali.DaliLoader(dali.FileReader(samples), sampler, batch, train, 16, device, 1, 0, 0,
                                   max_batches)


def check_solid_colour_batches(tmp_path: Path, device: torch.device) -> None:
    """Training batches hold the sampler's samples in its order, with their labels, on DEVICE."""
    _, samples = scan.scan_dataset(str(colour_dataset(tmp_path)))
    ids = ids_in_scan_order(samples["train"])
    sampler = samplers.ResumableSampler(range(TRAIN), num_replicas=2, rank=1, shuffle=True, seed=3)
    loader = dali_loader(samples["train"], sampler, True, device)
    for epoch in (0, 1):
        set_epoch(loader, epoch)
        expected = [ids[i] for i in list(iter(sampler))[:len(loader) * 4]]
        got, labels = [], []
        for images, target in loader:
            assert images.device.type == device.type and images.dtype == torch.uint8
            assert images.shape[1:] == (3, 16, 16)
            got += [decode_id(im.cpu()) for im in images]
            labels += target.cpu().tolist()
        assert got == expected, f"epoch {epoch}"
        assert labels == [i % 2 for i in got]
