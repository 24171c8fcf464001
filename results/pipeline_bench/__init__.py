"""Command-line alias kept for the documented ``python -m results.pipeline_bench --root DIR``.

The bench is :mod:`results.runners.pipeline_bench`; import that, not this package.
"""
