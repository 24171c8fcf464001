"""The data path: a dataset folder in, normalised batches on the training device out.

source -> sampler -> decode -> loader -> device normaliser; imagenet/data/README.md says which
module does which step. This file imports nothing, so the torch-free commands (``python -m
imagenet.staging``) stay torch-free.
"""
