"""``bench loaders``: each loader of a user's script on the same JPEGs, recorded as pipeline records with its
images/s per core against the baseline's; what each loader hands the script; a loader that cannot run is one
line."""
from __future__ import annotations

import pytest
import torch

from hpc_imagenet.harness import bench
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.runners import loader_bench
from hpc_imagenet.harness.runners.common import BenchError


def test_each_loader_is_recorded_against_the_baseline_in_the_same_rounds(jpeg_data, tmp_path):
    out = tmp_path / "loaders.jsonl"
    assert bench.main(["loaders", "--data", str(jpeg_data), "--loaders", "baseline", "fast", "fast-float32",
                       "--workers", "0", "--batch", "8", "--image-size", "32", "--rounds", "2",
                       "--records", str(out)]) == 0
    good, bad = records.load([out])
    assert not bad, bad
    by_loader = {r["point"]["loader"]: r for r in good}
    assert not any(r["point"].get("variant") or r["point"].get("backend") for r in good)  # not the shards bench's
    assert list(by_loader) == ["baseline", "fast", "fast-float32"]
    for rec in by_loader.values():
        assert rec["status"] == "ok" and rec["kind"] == "pipeline" and rec["point"]["images"] == 48, rec
        assert rec["metrics"]["rounds"] == 2 and rec["metrics"]["images_per_cpu_s"] > 0
    assert by_loader["baseline"]["metrics"]["ratio_per_core"] == pytest.approx(1.0)
    assert by_loader["fast"]["metrics"]["ratio_per_core"] > 0


@pytest.mark.parametrize("name,dtype", [("baseline", torch.float32), ("fast", torch.uint8),
                                        ("fast-float32", torch.float32)])
def test_each_loader_hands_the_script_what_it_names(jpeg_data, name, dtype):
    images, target = next(iter(loader_bench.loader(name, jpeg_data, 8, 32, 0)(0)))
    assert images.dtype == dtype and images.shape == (8, 3, 32, 32) and len(target) == 8
    if dtype == torch.float32:  # normalised with ImageNet's mean and deviation: centred near 0, not 0..1
        assert images.min() < 0 < images.max()


def test_an_unknown_loader_or_dali_where_it_is_missing_is_one_line(monkeypatch):
    with pytest.raises(BenchError, match="--loaders ffcv: unknown; choose from baseline, fast, fast-float32, dali"):
        loader_bench.check_names(["ffcv"])
    monkeypatch.setattr(loader_bench, "available", lambda: ["baseline", "fast", "fast-float32"])
    with pytest.raises(BenchError, match="--loaders dali: DALI is not installed here; pip install"):
        loader_bench.check_names(["fast", "dali"])
