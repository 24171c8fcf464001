"""The report: fixture records + real TensorBoard event files -> RESULTS.md and the tag's report, whose tables
and PNGs match the records; the published-model study's write-up from the same records.

Records are built with the harness's own record constructor, and the learning-curve runs are
written with torch's SummaryWriter, the way the engine's rank 0 writes them.
"""
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from hpc_imagenet.harness import report
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.report.common import Environments, fmt
from studies.published_model import formulas as sm
from studies.published_model import load_reference, report as model_report
from studies.published_model.model_section import hal_model, model_section

ENV = {"hostname": "node1", "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.x", "gpu_name": None,
       "gpu_count": 0, "nodes": 1, "git_commit": "abc123", "command": "bench"}
FIGURES = ("training_throughput", "training_time", "IO_loader", "learning_curves", "allreduce")  # the tag's


def _events(run_dir: Path, world: int, epochs: int = 3) -> None:
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(str(run_dir))
    for e in range(epochs):
        for tag, base in (("Top1/train", 10), ("Top1/val", 8), ("Top5/train", 40), ("Top5/val", 35)):
            w.add_scalar(tag, base + 10 * e + world, e)
    w.close()


def _train(sweep, world, rate, run_dir):
    point = {"variant": "ddp", "procs_per_node": world, "nodes": 1, "batch_size": 16, "precision": "O0",
             "amp_dtype": None, "data": "/data/demo", "arch": "resnet18", "image_size": 64, "epochs": 3,
             "steps_per_epoch": 5, "val_steps": 1, "workers": 0, "extra_args": [], "world_size": world}
    metrics = {"images_per_s": rate, "images_per_s_per_process": rate / world, "step_time_ms": 16e3 / (rate / world),
               "data_time_ms": 1.0, "compute_time_ms": 16e3 / (rate / world) - 1.0, "peak_memory_bytes": 1 << 30,
               "warmup_steps": 2, "measured_steps": 13, "world_size": world, "nodes": 1, "epoch_time_s": 1.5,
               "parameters": 11_689_512, "precision_label": "fp32"}
    return records.make_record("train", sweep, point, metrics, ENV, run_dir=str(run_dir))


def _io(backend, workers, readers, cache, rate):
    point = {"backend": backend, "workers": workers, "readers": readers, "cache": cache, "batch_size": 8,
             "image_size": 224, "images_per_reader": 32, "threads": 1}
    m = {"images": 32 * readers, "elapsed_s": 32 * readers / rate, "images_per_s": rate, "mb_per_s": rate * 0.11,
         "files_per_s": rate, "read_bytes": 0, "rchar": 1, "syscr": 1, "storage_mb_per_s": 0.0, "cold_verified": False,
         "cache_method": "pre-read", "bytes_per_image": 110000.0, "first_batch_s": 0.1}
    return records.make_record("io", "t-io-1", point, m, ENV)


def _ar(nbytes, t_us):
    m = {"bytes": nbytes, "time_us": t_us, "algbw_gbps": nbytes / t_us / 1e3, "busbw_gbps": nbytes / t_us / 1e3,
         "world_size": 2, "iters": 5}
    return records.make_record("allreduce", "t-ar-1", {"backend": "gloo", "world_size": 2, "bytes": nbytes}, m, ENV)


def _overlap(sweep, time, bucket_mb, exposed_ms, alone_ms):
    point = {"arch": "resnet18", "backend": "gloo", "batch_size": 16, "bucket_cap_mb": bucket_mb, "image_size": 64,
             "world_size": 2}
    m = {"step_time_ms": 200.0 + exposed_ms, "step_no_allreduce_ms": 200.0, "exposed_comm_ms": exposed_ms,
         "allreduce_alone_ms": alone_ms, "hidden_fraction": max(0.0, 1 - exposed_ms / alone_ms),
         "grad_bytes": 46758048, "world_size": 2, "steps": 10}
    return dict(records.make_record("overlap", sweep, point, m, ENV), time=time)


# the newest sweep is written first: the model must pick by time, not by line; inside the sweep the
# 25 MB (DDP default) bucket wins over the newer 1 MB one: h = 1 - 30/40 = 0.25
OVERLAP = [_overlap("t-ov-2", "2026-01-02T00:00:05+00:00", 25.0, 30.0, 40.0),
           _overlap("t-ov-2", "2026-01-02T00:00:09+00:00", 1.0, 10.0, 40.0),
           _overlap("t-ov-1", "2026-01-01T00:00:00+00:00", 25.0, 4.0, 40.0)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    recs = []
    for world, rate in ((1, 100.0), (2, 180.0)):
        run = tmp / f"run{world}"
        _events(run, world)
        recs.append(_train("t-train-1", world, rate, run))
    recs += [_io(b, w, 1, c, 50.0 + 10 * w) for b in ("torchvision", "pil") for c in ("cold", "warm") for w in (0, 2)]
    recs += [_io(b, 0, 2, c, 90.0) for b in ("torchvision", "pil") for c in ("cold", "warm")]
    recs += [_ar(s, 100 + s / 1e3) for s in (4, 4096, 1 << 20)]
    recs += OVERLAP
    recs.append(records.make_record("train", "t-train-1", {"world_size": 4}, {}, ENV, status="failed",
                                    error="exit code 1; RuntimeError: boom"))
    path = tmp / "fixture.jsonl"
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
        f.write('{"schema": 1, "kind": "train", "status": "ok"\n')  # truncated line
        partial = dict(recs[0], metrics={"world_size": 1})  # an ok record without its numbers
        f.write(json.dumps(partial) + "\n")
    md, problems = report.build([path], tmp / "out")
    tag = tmp / "out" / "reports" / "fixture" / "README.md"
    study = model_report.build([path], tmp / "study")
    return tmp, recs, md, problems, tag, study


def test_figures_are_valid_nonempty_pngs(built):
    tmp = built[0]
    for png in [tmp / "out" / "reports" / "fixture" / f"{name}.png" for name in FIGURES] + [
            tmp / "study" / "figures" / "scaling_model.png"]:
        assert png.stat().st_size > 10_000, png
        with Image.open(png) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 500


def _table_rows(md: str, header_start: str):
    lines = md.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| " + header_start))
    head = [c.strip() for c in lines[i].strip("|").split("|")]
    rows = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(head, [c.strip() for c in ln.strip("|").split("|")])))
    return rows


def test_results_md_links_the_tag_and_counts_its_failures(built):
    md = built[2].read_text()
    assert "[fixture](reports/fixture/README.md)" in md
    row = _table_rows(md, "report | nodes x hardware")[0]
    assert row["failed points / not counted / unusable lines"] == "1 / 0 / 2"
    assert row["best training throughput"].startswith("180 ")


def test_throughput_table_matches_records(built):
    _, recs, _, _, tag, _ = built
    rows = _table_rows(tag.read_text(), "series | hardware | GPUs")
    train = [r for r in recs if r["kind"] == "train" and r["status"] == "ok"]
    assert len(rows) == len(train)
    for row, rec in zip(rows, sorted(train, key=lambda r: r["metrics"]["world_size"])):
        assert row["images/s"] == fmt(rec["metrics"]["images_per_s"])
        assert int(row["GPUs"]) == rec["metrics"]["world_size"]
    # 180 images/s on 2 vs 100 on 1 -> 90% efficiency against the smallest point
    assert rows[1]["efficiency"] == "90.0%"


def test_io_and_allreduce_tables_match_records(built):
    _, recs, _, _, tag, _ = built
    md = tag.read_text()
    io_rows = _table_rows(md, "backend, cache | workers")
    io = [r for r in recs if r["kind"] == "io"]
    assert len(io_rows) == len(io)
    got = {(r["backend, cache"], r["workers"], r["readers"]): r["images/s"] for r in io_rows}
    for r in io:
        p = r["point"]
        key = (f"{p['backend']}, {p['cache']} cache", str(p["workers"]), str(p["readers"]))
        assert got[key] == fmt(r["metrics"]["images_per_s"])
    ar_rows = _table_rows(md, "series | bytes | size")
    assert [r["busbw (GB/s)"] for r in ar_rows] == [fmt(r["metrics"]["busbw_gbps"]) for r in recs
                                                    if r["kind"] == "allreduce"]


def test_learning_curves_come_from_the_event_files(built):
    rows = _table_rows(built[4].read_text(), "run | epoch")
    assert len(rows) == 6  # 2 runs x 3 epochs
    first = rows[0]
    assert first["epoch"] == "0" and first["train top-1 (%)"] == fmt(10.0 + 1)  # base + 10*0 + world


def test_failed_malformed_and_partial_records_are_reported(built):
    _, _, md_path, problems, tag, _ = built
    md = tag.read_text()
    reasons = [p.reason for p in problems]
    assert any("not valid JSON" in r for r in reasons)
    assert any("lacks numeric metric" in r and "images_per_s" in r for r in reasons)
    assert "boom" in md and "not valid JSON" in md and "lacks numeric metric" in md
    assert re.search(r"records \(\d+ ok, 1 failed, 2 unusable\)", md_path.read_text())


def test_every_record_names_its_environment(built):
    md = built[4].read_text()
    assert "| E1 | node1 | Test CPU |" in md and "| Test CPU | 2 |" in md


def test_scaling_model_is_checked_against_published_tables(built):
    md = built[5].read_text()
    rows = _table_rows(md, "measured | GPUs | measured images/s")
    hal = [r for r in rows if r["measured"].startswith("HAL")]
    assert len(hal) == 6 and hal[0]["error"] == "0.0%"  # calibrated on the smallest published point
    assert any(r["measured"].startswith("this machine") for r in rows)


def test_scaling_model_uses_the_newest_overlap_record(built):
    _, recs, _, _, _, study = built
    md = study.read_text()
    line = 1 + next(i for i, r in enumerate(recs) if r is OVERLAP[0])  # its line in fixture.jsonl
    assert f"Measured overlap: h = 25.0%, the hidden fraction of overlap record fixture.jsonl:{line} " in md
    assert "30 ms of the 40 ms gradient all-reduce stayed exposed" in md
    pub, links = load_reference()
    hal = hal_model(pub, links, 0.25)[0]
    rows = [r for r in _table_rows(md, "measured | GPUs | measured images/s") if r["measured"].startswith("HAL")]
    for r in rows:
        n = int(r["GPUs"])
        assert r["predicted (measured overlap)"] == fmt(sm.predict(hal, n, 0.25)["images_per_s"])
    pred = [r for r in _table_rows(md, "scenario | GPUs | comm ms/step") if r["scenario"].startswith("this machine")]
    for r in pred:  # exposed = comm minus the measured quarter, as long as backward is longer than that
        exposed = float(r["exposed ms/step (measured overlap)"])
        assert exposed == pytest.approx(0.75 * float(r["comm ms/step"]), rel=2e-3)


def test_scaling_model_without_overlap_records_assumes_all_exposed(tmp_path):
    pub, links = load_reference()
    md = model_section([], [], [], pub, links, Environments(), tmp_path)
    assert "no overlap records, so the model uses h = 0 (all communication exposed, the conservative assumption)" in md
    rows = _table_rows(md, "measured | GPUs | measured images/s")
    assert rows and all(r["predicted (measured overlap)"] == r["predicted (no overlap)"] for r in rows)
    assert any(r["predicted (full overlap)"] != r["predicted (no overlap)"] for r in rows)


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    assert report.main(["--records", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def _storage(nodes, readers, mb_per_s, fmt_name):
    point = {"nodes": nodes, "readers_per_node": readers, "format": fmt_name, "data": "imagenet", "seconds": 30}
    elapsed = 2.0
    m = {"elapsed_s": elapsed, "bytes": int(mb_per_s * 1e6 * elapsed), "files": 1000 * nodes, "nodes": nodes,
         "readers": nodes * readers, "mb_per_s": mb_per_s, "files_per_s": 500.0 * nodes,
         "mb_per_s_per_node": mb_per_s / nodes, "files_per_s_per_node": 500.0, "min_node_mb_per_s": mb_per_s / nodes,
         "bytes_per_file": 110e3, "complete": True}
    return records.make_record("storage", "t-storage-1", point, m, ENV, note="shared page cache")


def test_storage_section_has_a_row_per_record_and_a_series_per_format(tmp_path):
    recs = [_storage(n, 2, 100.0 * n, f) for f in ("imagefolder", "shards") for n in (1, 2)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    report.build([path], tmp_path / "out")
    md = (tmp_path / "out" / "reports" / "s" / "README.md").read_text()
    rows = _table_rows(md, "series | readers/node | nodes")
    assert [(r["series"], r["nodes"], r["MB/s"], r["MB/s per node"]) for r in rows] == [
        (f"{f}, cache as-is", str(n), fmt(100.0 * n), fmt(100.0)) for f in ("imagefolder", "shards") for n in (1, 2)]
    assert "shared page cache" in md
    assert (tmp_path / "out" / "reports" / "s" / "IO.png").stat().st_size > 10_000
