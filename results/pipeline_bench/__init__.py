"""``python -m results.pipeline_bench --root DIR``: its command line is ``__main__.py`` here.

The measurement is :mod:`results.runners.pipeline_bench` (``python -m results.bench pipeline`` records it).
"""
