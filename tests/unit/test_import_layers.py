"""Imports point one way: no import cycle among the product packages and the studies, the harness in its layers,
slurm below the harness, and no product package importing a study.

Read from the source with ``ast`` (nothing is imported), so an import placed inside a function to
dodge a cycle counts like any other. An edge ``a -> b`` is recorded for every ``import b`` /
``from b import x`` in module ``a`` (``from pkg import mod`` names the module ``pkg.mod`` when it
exists), for modules of the product packages only.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

# Modules are named here by their import names less the package's prefix (hpc_imagenet.imagenet.run.train_command ->
# imagenet.run.train_command; the studies keep theirs: studies.benches.report).
REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("hpc_imagenet", "studies")  # studies/ is checked with the package: it imports it

# the harness: what each layer may import (see hpc_imagenet/harness/README.md). The top (harness.bench and the
# command lines) may import every layer; nothing imports the top.
LAYERS = {
    "core": {"core"},
    "analysis": {"core", "analysis"},
    "runners": {"core", "analysis", "runners"},
    "report": {"core", "analysis", "report"},
}
TOP = "top"
KNOWN_CYCLES: List[List[str]] = []  # none: the whole product is held to no cycle at all


def checkout_name(target: str) -> str:
    """``hpc_imagenet.harness.core`` (the name modules import each other by) -> ``harness.core``."""
    return "" if target == "hpc_imagenet" else target.removeprefix("hpc_imagenet.")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return checkout_name(".".join(parts))


def product_modules() -> Dict[str, Path]:
    return {module_name(p): p for pkg in PRODUCT for p in sorted((REPO / pkg).rglob("*.py"))
            if ".venv" not in p.parts}


def imports_of(name: str, path: Path, known: Set[str]) -> Set[str]:
    """The product modules ``name`` imports anywhere in its file (module level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [checkout_name(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = checkout_name(node.module or "")
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}".strip(".") if f"{base}.{a.name}".strip(".") in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # ``import hpc_imagenet.harness.core.records`` also names harness.core
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> Dict[str, Set[str]]:
    mods = product_modules()
    # C extensions (built from PKG/.../_name.c) are product modules too, leaves that import none of ours
    extensions = {module_name(p) for pkg in PRODUCT for p in (REPO / pkg).rglob("*.c")}
    return {name: imports_of(name, path, set(mods) | extensions) for name, path in mods.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    """harness.<layer>... -> its layer; the harness itself, harness.bench and the command lines -> the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else TOP


def layer_violations(graph: Dict[str, Set[str]]) -> List[str]:
    bad = []
    for a, targets in sorted(graph.items()):
        if not a.startswith("harness"):
            continue
        for b in sorted(t for t in targets if t.startswith("harness.")):
            la, lb = layer(a), layer(b)
            if lb == TOP and b != "harness":
                bad.append(f"{a} -> {b}: nothing imports the command line on top")
            elif la != TOP and lb != TOP and lb not in LAYERS[la]:
                bad.append(f"{a} -> {b}: the {la} layer may import only {', '.join(sorted(LAYERS[la]))}")
    return bad


def test_the_checker_sees_imports_inside_functions(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import os\n\ndef f():\n    from hpc_imagenet.harness.core import records  # late\n"
                   "    from hpc_imagenet import launch\n    return records, launch\n")
    known = {"harness", "harness.core", "harness.core.records", "launch"}
    assert imports_of("harness.x", src, known) == {"harness.core.records", "launch"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_the_imports_between_the_packages():
    """The modules import each other as ``hpc_imagenet.X``: the graph holds those edges (an empty one has no cycle)."""
    graph = import_graph()
    assert graph["imagenet.run.train_command"] >= {"imagenet.config", "launch.environment"}
    assert {b.split(".")[0] for bs in graph.values() for b in bs} >= {"imagenet", "launch", "slurm", "harness"}


def test_no_import_cycle_in_the_product():
    found = [c for c in cycles(import_graph()) if c not in KNOWN_CYCLES]
    assert not found, "import cycles (function-level imports included): " + "; ".join(" <-> ".join(c) for c in found)


def test_results_layers_point_one_way():
    graph = import_graph()
    assert {layer(m) for m in graph if m.startswith("harness.")} >= set(LAYERS)  # the layers exist
    assert not layer_violations(graph), "\n".join(layer_violations(graph))


def test_the_engine_never_imports_the_harness():
    graph = import_graph()
    bad = [f"{a} -> {b}" for a, bs in graph.items() if a.split(".")[0] in ("imagenet", "launch")
           for b in bs if b.split(".")[0] in ("harness", "slurm")]
    assert not bad, bad


def test_slurm_never_imports_the_harness():
    """slurm sits below the harness: the harness submits through hpc_imagenet.slurm.client and writes batch files
    with hpc_imagenet.slurm.generate; the stage the job chain hands to the harness (its report) is a command line
    it renders, never an import."""
    graph = import_graph()
    bad = [f"{a} -> {b}" for a, bs in graph.items() if a.split(".")[0] == "slurm"
           for b in bs if b.split(".")[0] == "harness"]
    assert not bad, bad


def test_the_loop_and_the_data_path_never_import_the_room_that_assembles_them():
    """run/ builds train/ and data/; what they need of the process (its group, the stop signal) is in
    process/, below all three, which imports none of them."""
    graph = import_graph()
    rooms = lambda m: m.split(".")[1] if m.startswith("imagenet.") and m.count(".") >= 1 else None  # noqa: E731
    bad = [f"{a} -> {b}" for a, bs in graph.items() if rooms(a) in ("train", "data") for b in bs if rooms(b) == "run"]
    bad += [f"{a} -> {b}" for a, bs in graph.items() if rooms(a) == "process"
            for b in bs if rooms(b) in ("run", "train", "data")]
    assert not bad, bad


def test_nothing_in_the_product_imports_a_study():
    """studies/ stands on the harness and the engine; the toolkit a user installs never reaches into it."""
    graph = import_graph()
    bad = [f"{a} -> {b}" for a, bs in graph.items() if a.split(".")[0] != "studies"
           for b in bs if b.split(".")[0] == "studies"]
    assert not bad, bad


def test_no_study_imports_another():
    """Studies stand side by side: what two of them share lives below both (studies/common/, studies/cli.py)."""
    graph = import_graph()
    study = lambda m: m.split(".")[1] if m.startswith("studies.") else None  # noqa: E731
    below = (None, "common", "cli")
    bad = [f"{a} -> {b}" for a, bs in graph.items() if study(a) not in below
           for b in bs if study(b) not in below and study(b) != study(a)]
    assert not bad, bad


def test_no_module_can_be_imported_under_a_second_name():
    """Every module of the package has one name: from the checkout's root (on sys.path, as `python -m` puts it), the
    name without the package's prefix finds nothing, nor does the harness's old name under results."""
    names = [m for m in product_modules() if m and not m.startswith("studies")]
    second = [n for n in names] + [f"results.{n.removeprefix('harness.')}" for n in names if n.startswith("harness.")]
    code = ("import importlib.util, sys\nfound = []\nfor name in sys.argv[1:]:\n"
            "    try:\n        spec = importlib.util.find_spec(name)\n    except ImportError:\n        spec = None\n"
            "    if spec is not None and spec.origin not in (None, 'namespace'):\n        found.append(name)\n"
            "print(' '.join(found))\n")
    proc = subprocess.run([sys.executable, "-c", code, *second], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(second) > 150 and proc.stdout.split() == [], f"importable under a second name: {proc.stdout}"
