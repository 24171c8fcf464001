"""The exposed-communication bench (a one-off study): real gloo ranks, a valid record, and its write-up section."""
import json

from studies.benches import command as benches, report

RESNET18_PARAMS = 11_689_512


def test_one_process_is_refused_in_one_line(tmp_path, capsys):
    assert benches.main(["overlap", "--records", str(tmp_path / "r.jsonl"), "--world-sizes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--world-sizes 1 is not allowed" in err[0] and not (tmp_path / "r.jsonl").exists()


def test_overlap_point_is_recorded_and_reported(tmp_path):
    records_file = tmp_path / "r.jsonl"
    assert benches.main(["overlap", "--records", str(records_file), "--world-sizes", "2", "--steps", "2",
                       "--image-size", "32", "--batch", "2"]) == 0
    (rec,) = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert rec["kind"] == "overlap" and rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    assert m["grad_bytes"] == 4 * RESNET18_PARAMS and m["world_size"] == 2
    assert m["step_time_ms"] > 0 and m["step_no_allreduce_ms"] > 0 and m["allreduce_alone_ms"] > 0
    assert m["exposed_comm_ms"] == max(m["step_time_ms"] - m["step_no_allreduce_ms"], 0.0)
    assert 0.0 <= m["hidden_fraction"] <= 1.0
    text = report.build([records_file], tmp_path).read_text()
    assert "## DDP communication overlap" in text
    assert f"{m['exposed_comm_ms']:.4g}" in text  # the table carries the recorded number
