"""The test cluster's podman-hpc set-up refuses an import that would fill the disk, in one line, before podman
starts (podman's own error, half-way through the layer, does not say why)."""
from __future__ import annotations

import pytest

from hpc_imagenet.slurm.localcluster import podman
from hpc_imagenet.slurm.localcluster.commands import ClusterError


def test_an_image_larger_than_the_free_space_is_refused_naming_both_sizes(tmp_path):
    image = tmp_path / "image"
    (image / "opt").mkdir(parents=True)
    with open(image / "opt" / "weights.bin", "wb") as sparse:  # its size as tar reads it, no blocks on disk
        sparse.truncate(2**40)
    with pytest.raises(ClusterError, match=r"needs 2048\.0 GiB free under .* which has [0-9.]+ GiB: free some"):
        podman.require_room(image, tmp_path)


def test_an_image_that_fits_twice_passes(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    (image / "a").write_bytes(b"x" * 4096)
    (image / "link").symlink_to("a")
    podman.require_room(image, tmp_path)
