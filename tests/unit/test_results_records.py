"""Records carry no absolute machine paths: the harness's writer makes each line portable, and the
committed records are checked line by line."""
import json
import re

from results.core import records

# an absolute path outside the kernel's own folders (/dev/shm, /proc/self/io name the same thing anywhere)
MACHINE_PATH = re.compile(r"(?<![\w.])/(?!(?:dev|proc|sys)/)[\w.+-]+/[\w.+-]")


def test_append_writes_no_machine_path(tmp_path):
    rec = records.make_record(
        "io", "t-io-1", {"data": "/tmp/x9/imagenet_like", "backend": "fast"},
        {"images_per_s": 1.0, "mb_per_s": 1.0, "elapsed_s": 1.0, "images": 1},
        {"command": "/home/u/hpc-imagenet/results/bench.py io --records /scratch/u/out/t.jsonl"},
        note="staged to /dev/shm; counted by /proc/self/io",
        traceback='File "/home/u/hpc-imagenet/.venv/lib/python3.11/site-packages/torch/x.py", line 3')
    out = tmp_path / "t.jsonl"
    records.append(out, rec)
    line = out.read_text()
    assert not MACHINE_PATH.search(line), line
    back = json.loads(line)
    assert back["point"]["data"] == "imagenet_like"  # the data set's name stays
    assert back["environment"]["command"] == "results/bench.py io --records t.jsonl"  # checkout-relative
    assert back["note"] == "staged to /dev/shm; counted by /proc/self/io"
    assert '".venv/lib/python3.11/site-packages/torch/x.py"' in back["traceback"]
    assert rec["point"]["data"] == "/tmp/x9/imagenet_like"  # the caller's record is left as it was


def test_committed_records_hold_no_machine_path():
    files = sorted(records.RECORDS_DIR.glob("*.jsonl"))
    assert files
    bad = [f"{f.name}:{i}: {m.group(0)}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
           for m in [MACHINE_PATH.search(line)] if m]
    assert not bad, bad[:5]


def test_cited_parameter_counts_are_torchvisions():
    """The report takes ResNet sizes from the cited table (no torch needed); they are torchvision's models'."""
    import torchvision

    from results.analysis.parameters import cited_counts
    counts = {arch: n for arch, n in cited_counts().items() if isinstance(n, int)}
    assert {"resnet18", "resnet50"} <= set(counts)
    for arch, n in counts.items():
        model = torchvision.models.get_model(arch, weights=None)
        assert sum(t.numel() for t in model.parameters() if t.requires_grad) == n, arch
