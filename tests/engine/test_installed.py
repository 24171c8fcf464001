"""The project as installed from its wheel, outside any checkout (tests/installed.py): every console script answers
--help with its usage and exit 0, and the harness writes its records where it is told, never into site-packages."""
from __future__ import annotations

import configparser
import json
import subprocess
from pathlib import Path

from tests.helpers import REPO, child_env


def _scripts() -> list:
    """The console scripts pyproject.toml declares."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    parser = configparser.ConfigParser()
    parser.read_string("[s]\n" + section)
    return sorted(parser["s"])


def test_every_installed_command_prints_its_usage(installed_python: Path, tmp_path: Path) -> None:
    failed = []
    for name in _scripts():
        proc = subprocess.run([str(installed_python.parent / name), "--help"], cwd=tmp_path, env=child_env(),
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            failed.append(f"{name}: exit {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}")
    assert len(_scripts()) >= 19 and not failed, "\n".join(failed)


def _bench(python: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "hpc_imagenet.harness.bench", "allreduce", "--world-sizes", "2",
                           "--min-bytes", "4", "--max-bytes", "128", "--factor", "32", "--tag", "t"], cwd=cwd,
                          env=child_env(**env), capture_output=True, text=True, timeout=300)


def test_a_bench_from_an_install_writes_where_it_is_told(installed_python: Path, tmp_path: Path) -> None:
    work, told = tmp_path / "work", tmp_path / "told"
    work.mkdir()
    proc = _bench(installed_python, work, HPC_IMAGENET_RESULTS=str(told))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (told / "records" / "t.jsonl").read_text().splitlines()]
    assert [r["point"]["bytes"] for r in records] == [4, 128] and all(r["status"] == "ok" for r in records)
    proc = _bench(installed_python, work)  # not told: results/ in the folder it runs in
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((work / "results" / "records" / "t.jsonl").read_text().splitlines()) == 2
    site = installed_python.parent.parent / "lib"
    assert not list(site.rglob("*.jsonl")) and not list(site.rglob("records")), "the bench wrote into site-packages"
