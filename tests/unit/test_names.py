"""Names that explain themselves: no function parameter and no import alias in the product packages
has a one-letter name (``a`` for the parsed arguments, ``s`` for a job spec, ``as T``...). Lambda
parameters and comprehension variables may stay short: their whole scope is one line. Checked by
parsing the sources with ``ast`` (nothing is imported), nested functions and function-level imports
included."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("imagenet", "launch", "slurm", "results")


def one_letter_names(source: str) -> Iterator[tuple]:
    """(line, what) for every one-letter function parameter or import alias in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
            yield from ((arg.lineno, f"parameter {arg.arg!r} of {node.name}()") for arg in every if len(arg.arg) == 1)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((node.lineno, f"import {alias.name} as {alias.asname}") for alias in node.names
                        if alias.asname and len(alias.asname) == 1)


def product_offences() -> List[str]:
    return [f"{path.relative_to(REPO)}:{line}: {what}"
            for package in PRODUCT for path in sorted((REPO / package).rglob("*.py"))
            for line, what in one_letter_names(path.read_text())]


def test_no_one_letter_parameters_or_aliases_in_the_product() -> None:
    offences = product_offences()
    assert not offences, "one-letter names (say what the value is):\n" + "\n".join(offences)


def test_the_check_finds_each_kind_and_spares_lambdas_and_comprehensions() -> None:
    source = ("import numpy as n\n"
              "from os import path as p\n"
              "def run(a, *, s=1, **k):\n"
              "    def inner(x): return x\n"
              "    return sorted(a, key=lambda v: v), [i for i in a]\n")
    found = [line for line, _ in one_letter_names(source)]
    assert sorted(found) == [1, 2, 3, 3, 3, 4]
    clean = "import numpy as np\ndef run(args):\n    return [i for i in map(lambda v: v, args)]\n"
    assert list(one_letter_names(clean)) == []
