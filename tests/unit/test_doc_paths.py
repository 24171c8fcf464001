"""The repository files that the documents a reader sees name (README, the docs/ pages, the package
READMEs, RESULTS.md, the per-tag reports) exist: a module that moves must take its mentions with it.
Two kinds of mention are checked: a path written from the repository root (`hpc_imagenet/imagenet/data/loader.py`,
`docs/slurm.md`), and a markdown link relative to its document (`[data](data.md#bad-data)`,
`(../launch/README.md)`), whose #anchor must also name a heading of the linked page. The reports
are generated, so a stale path there comes from the report code and `make report` carries the fix.
Every package has a README, and in the packages listed in MODULE_LINES each module has its line there."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hpc_imagenet", "imagenet", "launch", "slurm", "results", "studies", "tests", "docs")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w\.(?:py|sh|md|jsonl|json|c))" % "|".join(PACKAGES))
# Paths named on purpose that are not this repository's files.
ELSEWHERE = {
    "imagenet/main.py",  # pytorch/examples' script, whose flags the entry scripts accept
    "results/records/mycluster.jsonl", "results/reports/mycluster/README.md",  # what a user's own tag writes
}
# Paths the committed records name as they were when measured: the generated reports quote the records'
# notes, and what a record measured is never rewritten. The local cluster lived in tests/ then (now
# hpc_imagenet/slurm/localcluster/).
RECORDED = {"tests/slurm_cluster.py"}
GENERATED = ("results/RESULTS.md", "results/reports/", "studies/published_model/RESULTS.md",
             "studies/fashion_mnist_race/RESULTS.md", "studies/benches/RESULTS.md")  # made by `make report`
# The report's words (markdown templates): their links resolve where the report is written, and are
# checked there, in the generated RESULTS.md and reports/<tag>/README.md
TEMPLATES = ("hpc_imagenet/harness/report/text/", "studies/published_model/text/", "studies/fashion_mnist_race/text/",
             "studies/benches/text/")
SCRATCH = "results/scratch/"  # the harness's ignored work area: records name their run folders there
# build: setuptools output (pip wheel .); .venv-compat: make test-compat's venv
SKIP_DIRS = {".venv", ".venv-compat", ".git", "runs", "data", "node_modules", "build"}
LINK = re.compile(r"\]\(([^()\s]+)\)")  # the target of [text](target)
FENCE = "```"
# Packages whose README has a line per module (a module is named as `name.py` or by its path from the
# README's folder).
MODULE_LINES = ("hpc_imagenet", "imagenet", "studies", "tests")


def _documents() -> Iterator[Path]:
    for path in ROOT.rglob("*.md"):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def _mentions(text: str) -> Iterator[Tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            yield number, match.group(1)


def _links(text: str) -> Iterator[Tuple[int, str]]:
    """Relative link targets outside fenced code blocks (web addresses and mail are not files)."""
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(FENCE):
            in_code = not in_code
        elif not in_code:
            for match in LINK.finditer(line):
                target = match.group(1)
                if not re.match(r"[a-z]+:", target):
                    yield number, target


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def _anchors(document: Path) -> set:
    text, in_code, found = document.read_text(errors="replace"), False, set()
    for line in text.splitlines():
        if line.lstrip().startswith(FENCE):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(_anchor(line))
    return found


def _broken_link(doc: Path, target: str) -> str:
    """Why a relative link from DOC does not resolve, or "" when it does."""
    file_part, _, anchor = target.partition("#")
    linked = (doc.parent / file_part).resolve() if file_part else doc
    if not linked.exists():
        return "no such file"
    if ROOT not in linked.parents and linked != ROOT:
        return "outside the repository"
    if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
        return f"no heading #{anchor} in {linked.relative_to(ROOT)}"
    return ""


def test_the_pattern_finds_paths_in_prose_and_code_spans():
    found = [p for _, p in _mentions("see `hpc_imagenet/imagenet/data/loader.py` and slurm/ddp_4node.sh, not "
                                     "x/imagenet/a.py")]
    assert found == ["hpc_imagenet/imagenet/data/loader.py", "slurm/ddp_4node.sh"]


def test_every_repository_path_a_document_names_exists():
    missing = [f"{doc.relative_to(ROOT)}:{line}: {path}"
               for doc in _documents() for line, path in _mentions(doc.read_text(errors="replace"))
               if path not in ELSEWHERE and not path.startswith(SCRATCH) and not (ROOT / path).exists()
               and not (path in RECORDED and str(doc.relative_to(ROOT)).startswith(GENERATED))]
    assert not missing, "documents name files that do not exist:\n" + "\n".join(missing)


def test_the_link_check_sees_relative_links_and_their_anchors(tmp_path):
    text = "[a](data.md#bad-data) [b](https://example.org) [c](#here)\n```\n[d](in-code.md)\n```\n[e](../x/y.md)"
    assert [target for _, target in _links(text)] == ["data.md#bad-data", "#here", "../x/y.md"]
    assert _anchor("## Shards: data at scale") == "shards-data-at-scale"
    assert _anchor("From Python (submitit)") == "from-python-submitit"


def test_every_relative_link_a_document_makes_resolves():
    broken = [f"{doc.relative_to(ROOT)}:{line}: {target} ({why})"
              for doc in _documents() if not str(doc.relative_to(ROOT)).startswith(TEMPLATES)
              for line, target in _links(doc.read_text(errors="replace")) if (why := _broken_link(doc, target))]
    assert not broken, "documents link what does not exist:\n" + "\n".join(broken)


def _readme_of(module: Path) -> Path:
    """The README.md of the nearest folder above MODULE that has one."""
    folder = module.parent
    while not (folder / "README.md").exists() and folder != ROOT:
        folder = folder.parent
    return folder / "README.md"


def test_every_package_has_a_readme():
    missing = [package for package in PACKAGES if package != "docs" and not (ROOT / package / "README.md").exists()]
    assert not missing, f"packages without a README.md: {missing}"


def test_every_module_has_a_line_in_its_package_readme():
    unnamed = []
    for package in MODULE_LINES:
        for module in sorted((ROOT / package).rglob("*.py")):
            if module.name == "__init__.py" or SKIP_DIRS.intersection(module.relative_to(ROOT).parts):
                continue
            readme = _readme_of(module)
            names = (module.name, module.relative_to(readme.parent).as_posix(), module.relative_to(ROOT).as_posix())
            if not any(f"`{name}`" in readme.read_text() for name in names):
                unnamed.append(f"{module.relative_to(ROOT)} (add its line to {readme.relative_to(ROOT)})")
    assert not unnamed, "modules without a line in their package README:\n" + "\n".join(unnamed)


COMMAND = re.compile(r"python3? -m ([\w.]+)")
OTHERS_COMMANDS = ("torch.", "pytest", "pip", "venv")  # other projects' modules the documents name


def test_every_command_the_documents_teach_is_the_packages_one_name():
    """`python -m NAME` in the README, docs and package READMEs is the form the tests run: a module of the package
    (or a study) under its one name, never a root-folder name such as `slurm.generate`. Generated reports quote
    their records' notes as measured, and are left out."""
    import importlib.util

    wrong = []
    for doc in _documents():
        if str(doc.relative_to(ROOT)).startswith(GENERATED):
            continue
        for number, line in enumerate(doc.read_text(errors="replace").splitlines(), 1):
            for name in COMMAND.findall(line):
                if name.startswith(OTHERS_COMMANDS) or name.endswith("."):  # `hpc_imagenet.<part>`: a pattern
                    continue
                if not name.startswith(("hpc_imagenet.", "studies.")) and name != "hpc_imagenet" or \
                        importlib.util.find_spec(name) is None:
                    wrong.append(f"{doc.relative_to(ROOT)}:{number}: python -m {name}")
    assert not wrong, "commands that are not the package's one name:\n" + "\n".join(wrong)
