"""``python -m studies.benches prepare`` on a tiny generated download: records that validate and carry no
machine paths, one per format x workers, and the write-up section that shows them."""
from hpc_imagenet.harness.core import records
from studies.benches import report
from tests.helpers import REPO, explain, python


def test_prepare_bench_records_and_report(tmp_path):
    rec = tmp_path / "r.jsonl"
    proc = python("-m", "studies.benches", "prepare", "--classes", "2", "--per-class", "3", "--val-per-class", "1",
                  "--workers", "1", "2", "--shard-size", "0.2", "--records", rec, "--work-dir", tmp_path / "work",
                  timeout=900)
    assert proc.returncode == 0, explain(proc)
    recs, problems = records.load([rec])
    assert not problems and len(recs) == 4
    assert {(r["point"]["format"], r["point"]["workers"]) for r in recs} == {
        ("shards", 1), ("shards", 2), ("folder", 1), ("folder", 2)}
    for r in recs:
        m = r["metrics"]
        assert r["status"] == "ok" and m["images"] == 2 * (3 + 1) and m["images_per_s"] > 0
        assert m["mb_per_s"] > 0 and 0.8 * m["bytes"] < m["written_bytes"] < 1.2 * m["bytes"]  # every image written
    text = rec.read_text()
    assert str(tmp_path) not in text and str(REPO) not in text  # no machine paths
    assert not (tmp_path / "work" / "prepare-out").exists()  # each output removed after its measurement
    path = report.build([rec], tmp_path)
    assert "## Preparing ImageNet" in path.read_text() and "r.jsonl:4" in path.read_text()
