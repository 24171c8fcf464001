"""The network: built by name, cast by one precision interface, averaged by --model-ema.

hpc_imagenet/imagenet/model/README.md has a line per module. This file imports nothing, so naming a module here
loads only that module."""
