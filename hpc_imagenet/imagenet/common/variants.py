"""The four training variants and their entry scripts: the one home of the names that the
configuration, the batch-file generator, the submitter and the benchmark setups all accept.

Torch-free on purpose: the generator and the submitter import it without the engine.
"""
from __future__ import annotations

# Entry script of each variant, relative to the checkout (the order is the order of --help).
SCRIPTS = {"nd": "imagenet/imagenet_nd.py", "dp": "imagenet/imagenet_dp.py",
           "ddp": "imagenet/imagenet_ddp.py", "amp": "imagenet/imagenet_ddp_apex.py"}
VARIANTS = tuple(SCRIPTS)
# One training process per job: nd on one GPU, dp driving every GPU of the node from one process.
SINGLE_PROCESS = ("nd", "dp")
