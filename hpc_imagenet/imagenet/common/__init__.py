"""The chores every room shares: safe file writes, one-line errors, exit statuses, the progress line
and the training console (rank 0 shows, the other ranks get one that does nothing), the variant
names, CPU seconds. Nothing here imports torch or another room; hpc_imagenet/imagenet/common/README.md has a line
per module."""
