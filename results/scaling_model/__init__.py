"""Command-line alias kept for the documented ``python -m results.scaling_model --check``.

The formulas are :mod:`results.analysis.scaling_model`; the check against the published points is
:mod:`results.analysis.whole_step`. Import those, not this package.
"""
