"""Pure arithmetic on records and cited figures: efficiency, comparisons, the scaling model.

Imports only results.core (and the engine); never a runner or the report."""
