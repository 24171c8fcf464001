"""The bench kinds that measure: local points, the SLURM sweep and queue, storage, I/O, pipeline,
all-reduce, overlap and fault jobs. Import results.core and results.analysis; never the report."""
