"""The last step of the data flow on a CPU: uint8 batches normalised into a buffer kept per shape, with the values
of the plain formula to the last bit, in either memory layout, and a batch overwritten under a live graph refused;
without reuse, a tensor of its own for each batch, with the same values."""
import pytest
import torch

from hpc_imagenet.imagenet.data.decode.base import IMAGENET_MEAN, IMAGENET_STD
from hpc_imagenet.imagenet.data.normalize import KEPT_SHAPES, DeviceNormalizer

CPU = torch.device("cpu")


def formula(images: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255
    return (images.float() - mean) / std


@pytest.mark.parametrize("channels_last", [False, True])
def test_the_values_of_the_formula_in_the_layout_asked(channels_last):
    images = torch.randint(0, 256, (5, 3, 17, 23), dtype=torch.uint8)
    out = DeviceNormalizer(CPU, channels_last)(images)
    assert out.dtype == torch.float32 and torch.equal(out, formula(images))
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert out.is_contiguous(memory_format=layout)


def test_one_buffer_per_shape_reused_batch_after_batch():
    normalize = DeviceNormalizer(CPU, False)
    first, second = (torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8) for _ in range(2))
    a = normalize(first).data_ptr()
    out = normalize(second)
    assert out.data_ptr() == a and torch.equal(out, formula(second))
    shorter = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    assert normalize(shorter).data_ptr() != a and torch.equal(normalize(shorter), formula(shorter))
    for n in range(5, 5 + 2 * KEPT_SHAPES):  # shapes that come and go do not pile up
        normalize(torch.zeros((n, 3, 8, 8), dtype=torch.uint8))
    assert len(normalize._buffers) <= KEPT_SHAPES


@pytest.mark.parametrize("channels_last", [False, True])
def test_without_reuse_each_batch_is_its_own_tensor_with_the_formulas_values(channels_last):
    """What a user's own loop gets (the library's data.train): batches it may keep, each allocated once."""
    normalize = DeviceNormalizer(CPU, channels_last, reuse=False)
    first, second = (torch.randint(0, 256, (4, 3, 9, 7), dtype=torch.uint8) for _ in range(2))
    kept = normalize(first)
    out = normalize(second)
    assert kept.data_ptr() != out.data_ptr() and not normalize._buffers
    assert torch.equal(kept, formula(first)) and torch.equal(out, formula(second))  # the first is not overwritten
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert out.is_contiguous(memory_format=layout)


def test_float_batches_pass_through():
    images = torch.rand(2, 3, 8, 8)
    assert torch.equal(DeviceNormalizer(CPU, False)(images), images)


def test_a_batch_overwritten_under_a_live_graph_is_refused():
    """Why reuse is safe: a step that still needs its batch for backward cannot be fed a later one silently."""
    normalize = DeviceNormalizer(CPU, False)
    conv = torch.nn.Conv2d(3, 4, 3)
    loss = conv(normalize(torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8))).sum()
    normalize(torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8))  # the same shape: the same buffer
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
