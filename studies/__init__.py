"""The project's own studies: questions answered once with the harness, not a toolkit a user runs.

Each study is a package with its command line (``python -m studies.NAME``), its records, its words and
its write-up (``studies/NAME/RESULTS.md``, generated from its records). Studies import the harness
(``results``) and the engine; nothing in ``results`` or ``imagenet`` imports a study.
"""
from pathlib import Path

STUDIES = Path(__file__).resolve().parent
