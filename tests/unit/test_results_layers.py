"""hpc_imagenet/harness/analysis/ is arithmetic only: no printing, no command line, no files written; the words,
tables and commands live in report/ and the command-line packages (results/README.md)."""
import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[2] / "hpc_imagenet" / "harness" / "analysis"
NOT_ARITHMETIC = {"argparse", "sys", "subprocess"}  # a command line, exits and streams, other programs
WRITERS = {"print", "open", "write_text", "write_bytes"}


def _offences(path: Path) -> list:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] in NOT_ARITHMETIC]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in NOT_ARITHMETIC:
            found.append(f"imports from {node.module}")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in WRITERS:
                found.append(f"calls {name} (line {node.lineno})")
    return found


def test_analysis_is_arithmetic_only():
    modules = sorted(ANALYSIS.glob("*.py"))
    assert len(modules) > 5
    offences = {p.name: o for p in modules if (o := _offences(p))}
    assert not offences, offences


def test_the_check_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import argparse\nfrom sys import exit\n\ndef f(rows):\n    print(rows)\n")
    assert _offences(bad) == ["imports argparse", "imports from sys", "calls print (line 5)"]
