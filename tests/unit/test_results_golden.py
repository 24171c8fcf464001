"""Golden files: RESULTS.md, every tag's report and every study's write-up regenerate from the committed
records exactly as committed (as submitit's golden sbatch tests compare a generated script with a stored one). A change
to the report code that changes its output fails here until the committed report is regenerated
(`make report`), so the committed report never drifts from the code and records beside it."""
import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_imagenet.harness import bench, report
from hpc_imagenet.harness.core import records

# one xdist worker runs the module, so the report (~10 CPU seconds) is regenerated once, not per worker
pytestmark = pytest.mark.xdist_group("golden")
RESULTS = records.RESULTS_DIR
REPO = RESULTS.parent
GOLDEN_TAG = "testcluster"


def _diff(got: Path, want: Path) -> str:
    lines = difflib.unified_diff(want.read_text().splitlines(), got.read_text().splitlines(), str(want), "regenerated",
                                 lineterm="", n=1)
    return "\n".join(list(lines)[:40])


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """The report regenerated once, by `python -m hpc_imagenet.harness.report` with torch and torchvision
    unimportable (test_report_regenerates_identically_without_torch): every golden test reads it."""
    folder = tmp_path_factory.mktemp("report")
    wrapper = folder / "without_torch.py"
    wrapper.write_text(WITHOUT_TORCH)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(wrapper), "--out", str(folder / "out")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "out"


def test_results_md_regenerates_identically(regenerated):
    got, want = regenerated / "RESULTS.md", RESULTS / "RESULTS.md"
    assert got.read_text() == want.read_text(), "RESULTS.md is stale; run `make report`:\n" + _diff(got, want)


def test_cluster_report_regenerates_identically(regenerated):
    got, want = (d / "reports" / GOLDEN_TAG / "README.md" for d in (regenerated, RESULTS))
    assert got.read_text() == want.read_text(), "reports are stale; run `make report`:\n" + _diff(got, want)
    # every figure the README shows was drawn, and nothing else
    shown = {line.split("(")[1].rstrip(")") for line in want.read_text().splitlines() if line.startswith("![")}
    assert shown and shown == {p.name for p in (regenerated / "reports" / GOLDEN_TAG).glob("*.png")}


def test_results_md_opens_with_the_targets_and_links_every_tag(regenerated):
    text = (regenerated / "RESULTS.md").read_text()
    assert text.split("\n## ")[1].startswith("Targets")
    for f in records.RECORDS_DIR.glob("*.jsonl"):
        assert f"(reports/{f.stem}/README.md)" in text and (regenerated / "reports" / f.stem / "README.md").exists()


def test_a_sweep_ends_with_its_tags_report(tmp_path):
    """What hpc_imagenet.harness.bench scaling --tag T --records FILE runs at its end."""
    recs = tmp_path / "sweep.jsonl"
    shutil.copy(records.RECORDS_DIR / f"{GOLDEN_TAG}.jsonl", recs)
    assert bench.report_of(recs, "mycluster") == 0
    readme = (tmp_path / "reports" / "mycluster" / "README.md").read_text()
    assert (readme.startswith("# mycluster: benchmark report")
            and "![training throughput](training_throughput.png)" in readme)
    assert (tmp_path / "RESULTS.md").exists()


def test_tag_without_records_is_one_line(tmp_path, capsys):
    assert report.main(["--tag", "nosuchtag", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuchtag.jsonl does not exist" in err[0] and "--tag nosuchtag" in err[0]


WITHOUT_TORCH = """
import importlib.abc, runpy, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, NoTorch())
sys.argv = ["python -m hpc_imagenet.harness.report", *sys.argv[1:]]
try:
    runpy.run_module("hpc_imagenet.harness.report", run_name="__main__", alter_sys=True)
except SystemExit as done:
    if done.code:
        raise
from studies.benches import report as benches
from studies.fashion_mnist_race import report as race
from studies.published_model import report as published

out = __import__("pathlib").Path(sys.argv[sys.argv.index("--out") + 1])
for name, study in (("published_model", published), ("fashion_mnist_race", race), ("benches", benches)):
    (out / "studies" / name).mkdir(parents=True)
    study.build(out_dir=out / "studies" / name)
"""


def test_report_regenerates_identically_without_torch(regenerated):
    """The report reads records, never the engine: with torch and torchvision unimportable, the command
    still writes RESULTS.md and every tag's report byte for byte as committed."""
    assert (regenerated / "RESULTS.md").read_bytes() == (RESULTS / "RESULTS.md").read_bytes()
    for committed in RESULTS.glob("reports/*/README.md"):
        assert (regenerated / committed.relative_to(RESULTS)).read_bytes() == committed.read_bytes()


STUDIES = REPO / "studies"


def test_every_study_write_up_regenerates_identically_without_torch(regenerated):
    """Each study's RESULTS.md and its figures, from its committed records (and the harness's), without torch."""
    for name in ("published_model", "fashion_mnist_race", "benches"):
        got, want = regenerated / "studies" / name / "RESULTS.md", STUDIES / name / "RESULTS.md"
        assert got.read_text() == want.read_text(), f"{want} is stale; run `make report`:\n" + _diff(got, want)
        shown = {line.split("(")[1].rstrip(")") for line in want.read_text().splitlines() if line.startswith("![")}
        assert shown == {f"figures/{p.name}" for p in (regenerated / "studies" / name).glob("figures/*.png")}
