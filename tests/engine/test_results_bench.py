"""The harness on CPU with tiny settings: every kind writes valid records, failures included."""
import json
from pathlib import Path

import pytest

from hpc_imagenet.harness import bench
from studies.benches import command as benches
from hpc_imagenet.harness.analysis.efficiency import with_efficiency
from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import curves as report_curves
from hpc_imagenet.harness.runners import common, local, train_bench

REPO = Path(__file__).resolve().parents[2]


def _read(path: Path):
    good, bad = records.load([path])
    assert not bad, bad
    return good


def test_allreduce_records(tmp_path):
    out = tmp_path / "r.jsonl"
    assert bench.main(["allreduce", "--world-sizes", "2", "--min-bytes", "4", "--max-bytes", "4K", "--factor", "32",
                       "--records", str(out), "--tag", "t"]) == 0
    recs = _read(out)
    assert [r["point"]["bytes"] for r in recs] == [4, 128, 4096]
    for r in recs:
        m = r["metrics"]
        assert r["status"] == "ok" and m["world_size"] == 2 and m["time_us"] > 0
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"])  # 2(n-1)/n = 1 for n = 2
        assert r["environment"]["torch"] and r["environment"]["cpu_count"]


def test_io_records_workers_readers_cache(tmp_path):
    out = tmp_path / "r.jsonl"
    data = tmp_path / "jpegs"
    from hpc_imagenet.harness.runners import jpegs
    info = jpegs.ensure_dataset(data, classes=2, train_per_class=8, val_per_class=1)
    assert 60_000 < info["mean_image_bytes"] < 160_000  # ImageNet-like files
    assert bench.main(["io", "--data", str(data), "--backends", "torchvision", "--workers", "0", "1",
                       "--readers", "2", "--images", "8", "--batch", "4", "--image-size", "32",
                       "--records", str(out), "--tag", "t"]) == 0
    recs = _read(out)
    assert len(recs) == 6  # (workers 0, 1, readers 2) x (cold, warm)
    for r in recs:
        m = r["metrics"]
        assert r["status"] == "ok" and m["images"] == 8 * r["point"]["readers"]
        assert m["images_per_s"] > 0 and m["mb_per_s"] > 0 and m["rchar"] > 0
        assert m["cache_method"] in ("posix_fadvise(DONTNEED)", "pre-read")


def test_pipeline_records_steady_state_ratios(tmp_path):
    out = tmp_path / "r.jsonl"
    data = tmp_path / "jpegs"
    from hpc_imagenet.harness.runners import jpegs
    jpegs.ensure_dataset(data, classes=2, train_per_class=4, val_per_class=1)
    assert bench.main(["pipeline", "--data", str(data), "--images", "8", "--workers", "0", "--rounds", "2",
                       "--batch", "4", "--image-size", "32", "--records", str(out), "--tag", "t"]) == 0
    recs = {(r["point"]["backend"], r["point"]["split"]): r for r in _read(out)}
    assert set(recs) == {(b, s) for b in ("baseline", "fast") for s in ("train", "val")}
    for r in recs.values():
        m = r["metrics"]
        assert r["status"] == "ok" and m["rounds"] == 2 and r["point"]["images"] == 8
        assert m["images_per_cpu_s"] == pytest.approx(1000 / m["cpu_ms_per_image"], rel=0.2)  # medians, not exact
        assert m["ratio_min"] <= m["ratio_per_core"] <= m["ratio_max"]
    assert recs[("baseline", "train")]["metrics"]["ratio_per_core"] == 1.0


def test_region_records_compare_the_c_decoder_with_nvimgcodec(tmp_path):
    """Both decoders on the same training boxes; the harness first checks they give the same pixels."""
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec comes with DALI (requirements-dev.txt)")
    out, data = tmp_path / "r.jsonl", tmp_path / "jpegs"
    from hpc_imagenet.harness.runners import jpegs
    jpegs.ensure_dataset(data, classes=2, train_per_class=4, val_per_class=1)
    assert benches.main(["region", "--data", str(data), "--images", "8", "--rounds", "2", "--records", str(out),
                       "--tag", "t"]) == 0
    recs = {r["point"]["decoder"]: r for r in _read(out)}
    assert set(recs) == {"c-libjpeg-turbo", "nvimgcodec-cpu"}
    for r in recs.values():
        m = r["metrics"]
        assert r["kind"] == "region_decode" and m["rounds"] == 2 and r["point"]["images"] == 8
        assert m["ratio_min"] <= m["ratio_per_core"] <= m["ratio_max"]
        assert r["environment"]["libraries"]["nvimgcodec"]
    assert recs["c-libjpeg-turbo"]["metrics"]["ratio_per_core"] == 1.0


def test_region_boxes_are_training_boxes():
    from studies.benches import region as region_bench
    boxes = region_bench.training_boxes([(500, 375)] * 200, seed=0)
    assert boxes == region_bench.training_boxes([(500, 375)] * 200, seed=0)
    for top, left, h, w in boxes:
        assert 0 <= top and 0 <= left and top + h <= 375 and left + w <= 500
        assert 0.08 * 500 * 375 * 0.99 <= h * w


def test_bad_io_backend_is_one_line_error(tmp_path, capsys):
    assert bench.main(["io", "--data", str(tmp_path), "--records", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train does not exist" in err[0]


def test_unusable_points_are_recorded_as_failed(tmp_path):
    out = tmp_path / "r.jsonl"
    rc = bench.main(["train", "--data", str(tmp_path / "missing"), "--procs", "1", "--records", str(out), "--tag", "t"])
    assert rc == 1
    (rec,) = _read(out)
    assert rec["status"] == "failed" and "does not exist" in rec["error"] and rec["environment"]["hostname"]
    rc = bench.main(["train", "--variants", "nd", "--procs", "2", "--records", str(out), "--tag", "t"])
    assert "runs one process" in _read(out)[-1]["error"]


def test_train_point_through_torchrun(tmp_path, monkeypatch):
    if not (REPO / "imagenet" / "imagenet_ddp.py").exists():
        pytest.skip("the training engine is not in this checkout")
    monkeypatch.setattr(local, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(local, "SCRATCH_DIR", tmp_path / "scratch")
    out = tmp_path / "r.jsonl"
    assert bench.main(["train", "--procs", "1", "--steps-per-epoch", "6", "--image-size", "32", "--batch", "4",
                       "--records", str(out), "--tag", "t"]) == 0
    (rec,) = _read(out)
    m = rec["metrics"]
    assert rec["status"] == "ok", rec["error"]
    assert m["images_per_s"] > 0 and m["measured_steps"] > 0 and m["world_size"] == 1
    assert m["scaling_efficiency"] == 1.0 and m["parameters"] > 1e6
    # the record names no path of this machine; the kept folder is under the (patched) runs folder
    assert not Path(rec["run_dir"]).is_absolute() and str(tmp_path) not in json.dumps(rec)
    (kept,) = [d for d in (tmp_path / "runs").glob("*/*") if d.name == Path(rec["run_dir"]).name]
    assert any(f.startswith("events.out.tfevents") for f in rec["kept_files"])
    assert not any(f.endswith(".tar") for f in rec["kept_files"])  # checkpoints stay out of the record
    # the kept folder holds only what the report reads, and no path of this machine
    assert sorted(p.name for p in kept.iterdir()) == sorted(rec["kept_files"])
    assert {f for f in rec["kept_files"] if not f.startswith("events.out.tfevents")} == {"run.json"}
    for f in kept.iterdir():
        assert str(tmp_path).encode() not in f.read_bytes(), f
    assert report_curves.read_curves(kept)["Top1/train"]  # the scalars survive the copy


def test_efficiency_against_smallest_point_of_the_sweep():
    def rec(sweep, world, rate):
        p = {"variant": "ddp", "batch_size": 16, "precision": "O0", "data": "dummy", "arch": "r", "image_size": 8,
             "workers": 0}
        return kinds.from_dict({"kind": "train", "status": "ok", "sweep": sweep, "time": "t", "environment": {},
                                "point": p, "metrics": {"world_size": world, "images_per_s": rate}})
    rs = with_efficiency([rec("a", 2, 100.0), rec("a", 4, 150.0), rec("b", 4, 50.0)])
    assert [r.metrics.scaling_efficiency for r in rs] == [1.0, 0.75, 1.0]
    assert rs[1].metrics.baseline_world_size == 2


def test_slurm_hook_writes_one_job_per_point(tmp_path):
    pytest.importorskip("hpc_imagenet.slurm.generate")
    runner = train_bench.SlurmRunner(gpus_per_node=4)
    p = train_bench.TrainPoint(procs_per_node=4, nodes=2, arch="resnet50", batch_size=64)
    text = runner.script(p, tmp_path / "run")
    assert "#SBATCH --nodes=2" in text and "--steps-per-epoch" in text and "LOG_DIR" in text


@pytest.mark.parametrize("cmd,tag", [("quick", "quick"), ("scaling", "scaling"), ("train", "local"),
                                     ("io", "local")])
def test_each_command_has_its_own_default_tag(cmd, tag):
    # a regression: a subparser's set_defaults(tag=...) once changed the shared --tag of every command
    a = bench.build_parser().parse_args([cmd])
    bench.resolve_tag(a)
    assert a.tag == tag and a.records == records.RECORDS_DIR / f"{tag}.jsonl"


def test_storage_readers_split_the_files_and_read_each_whole(tmp_path, monkeypatch):
    from hpc_imagenet.harness.runners import storage_bench
    data, out = tmp_path / "data", tmp_path / "out"
    sizes = {}
    for i in range(7):
        f = data / f"shard-{i}.tar" if i < 3 else data / "train" / "c" / f"{i}.JPEG"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * (1000 * (i + 1)))
        sizes[str(f)] = f.stat().st_size
    out.mkdir()
    assert storage_bench.list_files(data, out) == 7 and storage_bench.data_format(data) == "shards"
    for rank in (0, 1):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        monkeypatch.setenv("SLURM_NTASKS", "2")
        r = storage_bench.read_share(out, seconds=60, evict=rank == 0)
        share = sorted(sizes)[rank::2]
        assert (r["files"], r["bytes"]) == (len(share), sum(sizes[f] for f in share))
    m = storage_bench.metrics(out, nodes=1, readers_per_node=2)
    assert (m["files"], m["bytes"], m["readers"], m["complete"]) == (7, sum(sizes.values()), 2, True)
    with pytest.raises(ValueError, match="2 of 4 readers"):
        storage_bench.metrics(out, nodes=2, readers_per_node=2)


def test_a_failed_runs_cause_is_taken_from_before_torchruns_footer():
    log = "\n".join([
        "[rank0]: Traceback (most recent call last):", '[rank0]:   File "x.py", line 1, in <module>',
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "E1123 failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "=" * 60,
        "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/errors.html"])
    assert common.last_line(log) == "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert common.last_line("error: --lr must be positive\n" + log) == "error: --lr must be positive"
