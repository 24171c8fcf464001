"""``python -m results.scaling_model --check``: its command line is ``__main__.py`` here.

The formulas are :mod:`results.analysis.scaling_model`, the check's arithmetic
:mod:`results.analysis.whole_step`, its words and table :mod:`results.report.whole_step`.
"""
