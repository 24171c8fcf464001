"""The bench kinds that measure: local points, the SLURM sweep and queue, storage, I/O, pipeline,
all-reduce, overlap and fault jobs. Import hpc_imagenet.harness.core and hpc_imagenet.harness.analysis; never the
report."""
