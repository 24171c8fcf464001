"""results/gpu_collect.sh files a GPU lease's output folder for real: records appended once each and made
portable, run folders kept with only what the report reads, bad input refused in one line."""
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from hpc_imagenet.harness.core import records

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "results" / "gpu_collect.sh"


def _lease(tmp_path: Path) -> Path:
    """A folder as results/gpu_session.sh leaves it: <tag>.jsonl with machine paths in it, runs-<stage>.tgz."""
    out = tmp_path / "lease"
    out.mkdir()
    for seed in (1, 2):
        rec = records.make_record("time_to_accuracy", f"tta-gpu-x-ours-{seed}", {"program": "hpc-imagenet",
                                  "seed": seed}, {"best_top1": 91.0}, {"command": "/home/someone/ck/results/bench.py"})
        with (out / "tta-gpu-x.jsonl").open("a") as lines:
            lines.write(json.dumps(rec) + "\n")
    run = tmp_path / "made" / "results" / "runs" / "gpu-x-train-1" / "point"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"log_dir": "/home/someone/ck/results/runs/x", "images_per_s": 6014}))
    (run / "checkpoint.pth.tar").write_bytes(b"weights")
    with tarfile.open(out / "runs-best.tgz", "w:gz") as tgz:
        tgz.add(tmp_path / "made" / "results", arcname="results")
    return out


def _collect(dest: Path, *folders: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *map(str, folders)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "DEST": str(dest),
                               "RACE_DEST": str(dest / "race"),
                               "PYTHONPATH": str(REPO)})


def test_a_lease_is_filed_once_and_portable(tmp_path):
    lease, dest = _lease(tmp_path), tmp_path / "dest"
    first = _collect(dest, lease)
    assert first.returncode == 0, first.stderr
    assert "2 new record(s)" in first.stdout and "kept gpu-x-train-1/point" in first.stdout
    assert "**No headline yet.**" in first.stdout  # the race's check on what was filed: these two make no round
    filed = (dest / "race" / "tta-gpu-x.jsonl").read_text()  # the race's records go to its study
    assert len(filed.splitlines()) == 2 and "/home/someone" not in filed
    kept = dest / "runs" / "gpu-x-train-1" / "point"
    assert sorted(p.name for p in kept.iterdir()) == ["run.json"]  # no checkpoint
    assert "/home/someone" not in (kept / "run.json").read_text()
    again = _collect(dest, lease)  # filing the same folder twice adds nothing
    assert again.returncode == 0 and "0 new record(s)" in again.stdout
    assert (dest / "race" / "tta-gpu-x.jsonl").read_text() == filed


def test_a_folder_that_is_not_there_is_refused(tmp_path):
    done = _collect(tmp_path / "dest", tmp_path / "nowhere")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is not a folder" in done.stderr
    assert not (tmp_path / "dest" / "records").exists() or not any((tmp_path / "dest" / "records").iterdir())
