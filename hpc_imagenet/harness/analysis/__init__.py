"""Pure arithmetic on records and cited figures: efficiency, comparisons, the scaling model.

Imports only hpc_imagenet.harness.core (and the engine); never a runner or the report."""
