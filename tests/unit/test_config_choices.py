"""The torch-free choice lists of hpc_imagenet.imagenet.config.choices match the libraries they stand in for."""
import torchvision

from hpc_imagenet.imagenet.config import choices
from hpc_imagenet.imagenet.data import decode


def test_model_names_match_torchvision_classification_models():
    assert sorted(choices.MODELS) == sorted(torchvision.models.list_models(module=torchvision.models))


def test_data_backends_match_the_decode_registry():
    assert sorted(choices.DATA_BACKENDS) == sorted(decode.BACKENDS)
    assert sorted(choices.BATCH_DATA_BACKENDS) == sorted(set(decode.BACKENDS) - set(decode.per_sample_names()))
