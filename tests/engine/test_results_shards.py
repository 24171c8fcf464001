"""``hpc_imagenet.harness.bench shards`` on a tiny set: real conversions, strace-counted opens of a seeded multi-epoch
run with loader workers, real memory of workers, records that validate, and the report section that
shows them."""
from hpc_imagenet.harness import report
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.runners.data_scale_bench import index_memory

from tests.helpers import explain, python


def test_shards_bench_records_and_report(tmp_path):
    rec = tmp_path / "r.jsonl"
    proc = python("-m", "hpc_imagenet.harness.bench", "shards", "--images", "16", "--rounds", "1", "--shard-size",
                  "0.5",
                  "--index-samples", "20000", "--loader-workers", "2", "--io-workers", "2", "--io-epochs", "3",
                  "--records", rec,
                  "--data", str(_photos(tmp_path)), timeout=900)
    assert proc.returncode == 0, explain(proc)
    recs, problems = records.load([rec])
    assert not problems
    kinds = {r["kind"] for r in recs}
    assert kinds == {"pipeline", "data_opens", "index_memory"}
    variants = {r["point"]["variant"] for r in recs if r["kind"] == "pipeline"}
    assert variants == {"baseline", "fast+folder", "fast+shards", "fast+shards-max320"}
    opens = {r["point"]["source"]: r["metrics"] for r in recs if r["kind"] == "data_opens"}
    assert opens["folder"]["images"] == opens["shards"]["images"] == 3 * 16
    assert 1 < opens["shards"]["shards"] < 16
    if "opens" in opens["folder"]:  # strace present: an open per image read; each worker opens a shard once
        folder, shards = opens["folder"], opens["shards"]
        assert folder["opens"] == 3 * 16 and folder["opening_processes"] == 2
        assert shards["opening_processes"] == 3 and shards["max_opens_per_file"] == 1  # 2 workers + the index
        assert shards["opens"] <= 2 * shards["shards"] + 1
    # the test suite's other workers share the machine: its points count here (--quiet-share 1)
    report.build([rec], tmp_path / "out", quiet_share=1.0)
    text = (tmp_path / "out" / "reports" / rec.stem / "README.md").read_text()
    assert "## Data at scale: shards" in text and "fast+shards-max320" in text


def _photos(tmp_path):
    from hpc_imagenet.harness.runners import jpegs

    root = tmp_path / "jpegs"
    jpegs.ensure_dataset(root, classes=2, train_per_class=8, val_per_class=1)
    return root


def test_numpy_index_is_not_copied_by_loader_workers():
    """The point of the numpy index: workers reading every entry keep it shared."""
    n = 200_000
    lst, folder = index_memory("list", n, 2), index_memory("folder", n, 2)
    assert lst["touched"] == folder["touched"] == 2 * -(-n // 65536)
    assert folder["worker_private_bytes"] < lst["worker_private_bytes"] / 2
