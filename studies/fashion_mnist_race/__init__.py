"""Time to a target top-1 on real photographs: pytorch/examples' main.py against the engine on Fashion-MNIST.

``python -m studies.fashion_mnist_race run ...`` races the two programs (:mod:`.runner`) and appends to
``records/`` (``run --phase round``: the protocol round in one go, :mod:`.protocol_round`);
``python -m studies.fashion_mnist_race report`` writes ``RESULTS.md`` here, and ``... check`` prints the headline
recomputed from the records (exit 1 while no round keeps every rule: :mod:`.headline`). The protocol (which runs
count, the goal they set) is :mod:`.protocol`; the engine's recipes are :mod:`.recipe`; the sections' words are in
``text/`` (their table headers beside the code that draws each table).
"""
from pathlib import Path

from hpc_imagenet.harness.report.words import Words

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
REFERENCE = HERE / "reference"
words = Words(HERE / "text")  # this study's words, read by its sections alone

from studies.fashion_mnist_race import kinds  # noqa: E402,F401  (declares this study's record kinds)
