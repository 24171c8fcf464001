"""The data path: a dataset folder in, normalised batches on the training device out.

source -> sampler -> decode -> loader -> device normaliser; hpc_imagenet/imagenet/data/README.md says which
module does which step. This file imports nothing, so the torch-free commands (``python -m
hpc_imagenet.imagenet.data.staging``) stay torch-free.
"""

# Loader workers sample every shard of a split (random order), so a node opens about ranks x workers x
# shards files per run: 1 GB shards (ImageNet's train split in ~130) keep that over 1,000x below an
# ImageFolder's opens at 8 nodes x 8 GPUs x 8 workers (RESULTS.md "Files opened"), and ~130 shards
# still give conversion and staging enough files to work on in parallel.
# It lives here, where nothing is imported, so the report can name it without torch.
DEFAULT_SHARD_MB = 1024
