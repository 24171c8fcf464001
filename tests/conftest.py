"""Session-wide fixtures: generated JPEG datasets shared by the tests."""
from __future__ import annotations

import pytest

from imagenet import demo_data


@pytest.fixture(scope="session")
def jpeg_data(tmp_path_factory):
    """3 classes, 16 train / 7 val JPEGs each: 21 val images, an odd count to exercise the tail."""
    return demo_data.generate(tmp_path_factory.mktemp("jpeg_data"), classes=3, train_per_class=16,
                              val_per_class=7, size=(40, 32))


@pytest.fixture(scope="session")
def learnable_data(tmp_path_factory):
    """4 clearly different classes, enough images to learn in a few CPU epochs."""
    return demo_data.generate(tmp_path_factory.mktemp("learnable"), classes=4, train_per_class=32,
                              val_per_class=8, size=(40, 32))


def pytest_report_header(config):
    import torch

    return f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
