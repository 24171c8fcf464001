"""The training loop and what it steps: optimizer, schedules, metrics, checkpoints and the run's records.

hpc_imagenet/imagenet/train/README.md has a line per module. This file imports nothing, so naming a module here
loads only that module."""
