"""The test suite's own layout: every test module lives in a tier folder and carries that tier's
marker, and no test module imports another (shared fixtures belong in a conftest.py, shared plain
code in a helper module such as tests/helpers.py). Checked by parsing the sources, imports inside
functions included."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List

from tests.helpers import TIERS

TESTS = Path(__file__).resolve().parents[1]


def _imported(source: str, filename: str = "<source>") -> Iterator[str]:
    """Every module name an import statement may load: ``from a import b`` yields a and a.b."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            yield base
            yield from (f"{base.rstrip('.')}.{alias.name}" if node.module else base + alias.name
                        for alias in node.names)


def imported_test_modules(source: str, filename: str = "<source>") -> List[str]:
    """The test modules (test_*.py of this suite) that SOURCE imports, named up to the test_ part."""
    found = set()
    for name in _imported(source, filename):
        parts = name.lstrip(".").split(".")
        ours = name.startswith((".", "tests.")) or len(parts) == 1  # not some installed package's test_x
        first = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
        if ours and first is not None:
            found.add(name[:len(name) - len(name.lstrip("."))] + ".".join(parts[:first + 1]))
    return sorted(found)


def _test_modules() -> List[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_the_check_sees_every_form_of_import() -> None:
    source = """
import tests.cluster.test_slurm_requeue
from tests.unit import test_decode_backends
from tests.unit.test_decode_backends import photo
from .test_dali import needs_dali
from . import test_dali as d
def later():
    import test_shards
"""
    assert imported_test_modules(source) == [".test_dali", "test_shards", "tests.cluster.test_slurm_requeue",
                                             "tests.unit.test_decode_backends"]
    allowed = "from tests.helpers import photo\nfrom tests.cluster.requeue import submit_script\nimport pytest\n"
    assert imported_test_modules(allowed) == []


def test_no_test_module_imports_another() -> None:
    found = {str(path.relative_to(TESTS)): imported_test_modules(path.read_text(), str(path))
             for path in _test_modules()}
    offenders = {path: names for path, names in found.items() if names}
    assert len(found) > 30
    assert not offenders, ("test modules import other test modules; move what they share into a conftest.py "
                           f"fixture or a helper module (tests/helpers.py): {offenders}")


def test_every_test_module_is_in_a_tier_folder() -> None:
    outside = [str(p.relative_to(TESTS)) for p in _test_modules() if p.relative_to(TESTS).parts[0] not in TIERS]
    assert not outside, f"put these in one of tests/{{{','.join(TIERS)}}}/: {outside}"


def test_this_test_carries_its_tiers_marker(request) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert not any(request.node.get_closest_marker(tier) for tier in TIERS if tier != "unit")


def test_the_long_tier_names_tests_that_exist() -> None:
    """make test leaves tests/conftest.py's long scenarios to make test-long: a renamed module or test would quietly
    move back into make test's time."""
    from tests import conftest

    missing_modules = sorted(path for path in conftest.LONG_MODULES if not (TESTS / path).is_file())
    functions = {node.name for path in _test_modules() for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef)}
    missing_tests = sorted(name for name in conftest.LONG_TESTS if name.split("[")[0] not in functions)
    assert not missing_modules and not missing_tests, (missing_modules, missing_tests)
