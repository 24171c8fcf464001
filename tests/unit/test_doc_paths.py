"""The repository files that the documents a reader sees name (README, RESULTS.md, the per-tag
reports, the package READMEs) exist: a module that moves must take its mentions with it. The reports
are generated, so a stale path there comes from the report code and `make report` carries the fix."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("imagenet", "launch", "slurm", "results", "tests")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w\.(?:py|sh|md|jsonl|json|c))" % "|".join(PACKAGES))
# Paths named on purpose that are not this repository's files.
ELSEWHERE = {
    "imagenet/main.py",  # pytorch/examples' script, whose flags the entry scripts accept
    "results/records/mycluster.jsonl", "results/reports/mycluster/README.md",  # what a user's own tag writes
}
# Paths the committed records name as they were when measured: the generated reports quote the records'
# notes, and a record is never rewritten. The local cluster lived in tests/ then (now slurm/localcluster/).
RECORDED = {"tests/slurm_cluster.py"}
GENERATED = ("results/RESULTS.md", "results/reports/")  # made from the records by `make report`
SCRATCH = "results/scratch/"  # the harness's ignored work area: records name their run folders there
SKIP_DIRS = {".venv", ".git", "runs", "data", "node_modules"}


def _documents() -> Iterator[Path]:
    for path in ROOT.rglob("*.md"):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def _mentions(text: str) -> Iterator[Tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            yield number, match.group(1)


def test_the_pattern_finds_paths_in_prose_and_code_spans():
    found = [p for _, p in _mentions("see `imagenet/data/loader.py` and results/runners/jpegs.py, not x/imagenet/a.py")]
    assert found == ["imagenet/data/loader.py", "results/runners/jpegs.py"]


def test_every_repository_path_a_document_names_exists():
    missing = [f"{doc.relative_to(ROOT)}:{line}: {path}"
               for doc in _documents() for line, path in _mentions(doc.read_text(errors="replace"))
               if path not in ELSEWHERE and not path.startswith(SCRATCH) and not (ROOT / path).exists()
               and not (path in RECORDED and str(doc.relative_to(ROOT)).startswith(GENERATED))]
    assert not missing, "documents name files that do not exist:\n" + "\n".join(missing)
