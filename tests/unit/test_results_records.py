"""Records carry no absolute machine paths: the harness's writer makes each line portable, and the
committed records are checked line by line."""
import json
import re

from hpc_imagenet.harness.core import kinds, records

# an absolute path outside the kernel's own folders (/dev/shm, /proc/self/io name the same thing anywhere)
MACHINE_PATH = re.compile(r"(?<![\w.])/(?!(?:dev|proc|sys)/)[\w.+-]+/[\w.+-]")


def test_append_writes_no_machine_path(tmp_path):
    rec = records.make_record(
        "io", "t-io-1", {"data": "/tmp/x9/imagenet_like", "backend": "fast"},
        {"images_per_s": 1.0, "mb_per_s": 1.0, "elapsed_s": 1.0, "images": 1},
        {"command": "/home/u/hpc-imagenet/hpc_imagenet/harness/bench.py io --records /scratch/u/out/t.jsonl"},
        note="staged to /dev/shm; counted by /proc/self/io",
        traceback='File "/home/u/hpc-imagenet/.venv/lib/python3.11/site-packages/torch/x.py", line 3')
    out = tmp_path / "t.jsonl"
    records.append(out, rec)
    line = out.read_text()
    assert not MACHINE_PATH.search(line), line
    back = json.loads(line)
    assert back["point"]["data"] == "imagenet_like"  # the data set's name stays
    assert back["environment"]["command"] == "hpc_imagenet/harness/bench.py io --records t.jsonl"  # checkout-relative
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

    from hpc_imagenet.harness.analysis.parameters import cited_counts
    counts = {arch: n for arch, n in cited_counts().items() if isinstance(n, int)}
    assert {"resnet18", "resnet50"} <= set(counts)
    for arch, n in counts.items():
        model = torchvision.models.get_model(arch, weights=None)
        assert sum(t.numel() for t in model.parameters() if t.requires_grad) == n, arch


def test_validate_checks_each_kind_against_its_typed_metrics():
    env = {"hostname": "node1"}
    for kind, declared in kinds.KINDS.items():
        typed = declared.metrics
        metrics = {name: 1 for name in kinds.required(typed)}
        assert records.validate(records.make_record(kind, "s", {}, metrics, env)) is None, kind
        first = sorted(kinds.required(typed))[0]
        reason = records.validate(records.make_record(kind, "s", {}, dict(metrics, **{first: "1"}), env))
        assert reason == f"ok {kind} record lacks numeric metric(s) {first}"
    fault = {"survived": 1, "steps_trained_twice": 0, "checkpoints_lost": 0}
    assert records.validate(records.make_record("fault", "s", {}, dict(fault, detect_s=True), env)) is not None
    failed = records.make_record("train", "s", {}, {}, env, status="failed", error="exit 1")
    assert records.validate(failed) is None and "error message" in records.validate(dict(failed, error=None))
    assert records.validate({"schema": 1, "kind": "train"}).startswith("missing field(s) status, sweep, time")
    assert records.validate(dict(failed, kind="nosuch")) == "unknown kind 'nosuch'"


def test_every_committed_record_is_valid():
    loaded, problems = records.load([records.RECORDS_DIR])
    assert loaded and not problems


def test_loaded_records_are_typed_once_and_keep_their_json(tmp_path):
    path = tmp_path / "t.jsonl"
    point = {"variant": "ddp", "arch": "resnet18", "batch_size": 16, "data": "dummy",
             "extra_args": ["--profile-steps", "5"], "not_typed": 1}
    metrics = {"images_per_s": 320.0, "images_per_s_per_process": 160.0, "step_time_ms": 50.0, "world_size": 2,
               "nodes": 2}
    env = {"gpu_name": "H100", "gpu_count": 1, "git_commit": "abc", "source_digest": "d1", "platform": "linux"}
    records.append(path, records.make_record("train", "s-1", point, metrics, env, runner="slurm", note="n"))
    (rec,), problems = records.load_typed([path])
    assert not problems and isinstance(rec, kinds.Record) and rec.ok and rec.source == "t.jsonl:1"
    assert (rec.metrics.images_per_s, rec.point.batch_size, rec.world_size, rec.nodes) == (320.0, 16, 2, 2)
    assert rec.metrics.data_time_ms is None  # a field the record lacks reads as None
    assert rec.profiled and not rec.local and rec.runner == "slurm" and rec.note == "n"
    assert rec.environment.gpu_name == "H100" and rec.environment.code == "d1"
    assert rec.recorded("point")["not_typed"] == 1  # untyped fields stay in the JSON as recorded
    assert records.load([path])[0][0] == rec.raw and rec.raw["_source"] == "t.jsonl:1"  # the dict view
    assert records.by_kind([rec], "train") == [rec] and records.by_kind([rec], "io") == []


def test_metrics_classes_mark_what_validation_requires():
    assert kinds.required(kinds.TrainMetrics) == ("images_per_s", "images_per_s_per_process", "step_time_ms",
                                                  "world_size")
    assert kinds.numeric(kinds.FaultMetrics) == ("survived", "steps_trained_twice", "checkpoints_lost", "detect_s")


def test_group_by_keeps_the_order_items_were_met_in():
    groups = records.group_by(["b1", "a1", "b2", "c1", "a2"], lambda s: s[0])
    assert groups == {"b": ["b1", "b2"], "a": ["a1", "a2"], "c": ["c1"]}
    assert list(groups) == ["b", "a", "c"]
