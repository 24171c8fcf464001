"""The faults report's table: one row per fault and launcher of the newest sweep; recovered without
a user, median and maximum times to detect and to training again, the most work lost, the
checkpoints lost; failed runs listed with their error."""
from hpc_imagenet.harness import report
from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import faults as faults_report

ENV = {"hostname": "node1", "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.x", "nodes": 2}


def _fault(sweep, fault, detect, twice, launcher="srun", **measured):
    metrics = {"survived": 1, "steps_trained_twice": twice, "checkpoints_lost": 0, **measured}
    if detect is not None:
        metrics["detect_s"] = detect
    return records.make_record("fault", sweep, {"fault": fault, "launcher": launcher, "nodes": 2}, metrics, ENV)


def test_table_rows_come_from_the_newest_sweep(tmp_path):
    recs = [_fault("old", "kill -9", 99.0, 50), _fault("old", "retired scenario", 1.0, 1),
            _fault("new", "kill -9", 4.0, 3, recovered=1, recover_s=40.0,
                                                       seconds_lost=1.5),
            _fault("new", "kill -9", 6.0, 3, recovered=1, recover_s=60.0, seconds_lost=2.0),
            _fault("new", "kill -9", 5.0, 2, recovered=1, recover_s=50.0, seconds_lost=1.0),
            _fault("new", "kill -9", None, 4, launcher="torchrun", recovered=1, recover_s=30.0),
            _fault("new", "disk full", None, 3, recovered=0),
            records.make_record("fault", "new", {"fault": "network loss"}, {}, ENV, status="failed",
                                error="timed out after 60s waiting for rank 0's one-line error")]
    path = tmp_path / "faults.jsonl"
    for r in recs:
        records.append(path, r)
    _, problems = report.build([path], tmp_path)
    assert not problems
    text = (tmp_path / "reports" / "faults" / "README.md").read_text()
    assert "## Fault tolerance" in text
    rows = {(r[0], r[1]): r for r in faults_report.rows(records.load_typed([path])[0])}
    # injected, recovered, detect median/max, to training again median/max, steps lost, seconds lost, checkpoints lost
    assert rows[("kill -9", "srun")][3:12] == [3, "yes", 5.0, 6.0, 50.0, 60.0, 3, 2.0, 0]
    assert rows[("kill -9", "torchrun")][3:10] == [1, "yes", None, None, 30.0, 30.0, 4]
    assert rows[("disk full", "srun")][4:9] == ["no", None, None, None, None]
    assert "| kill -9 | srun | 2 | 3 | yes | 5 | 6 | 50 | 60 | 3 | 2 | 0 |" in text
    assert "network loss: timed out after 60s" in text and "retired scenario" not in text


def test_records_from_before_the_recovery_columns_show_dashes(tmp_path):
    row = faults_report.rows([kinds.from_dict({**_fault("s", "kill -9", 2.0, 7), "_source": "faults.jsonl:1"})])[0]
    assert row[4] is None and row[7:9] == [None, None] and row[9] == 7


def test_no_fault_records_no_section():
    assert faults_report.section([]) == ""


def test_a_scenarios_measurement_is_recorded_as_the_committed_records_are():
    """``hpc_imagenet.harness.bench faults`` turns a scenario's Measurement into a record with the fields, point and
    metrics (rounded to 0.01 s) of the committed ones, which the report reads."""
    import json

    from hpc_imagenet.harness.runners.faults_bench import fault_record
    from hpc_imagenet.slurm.localcluster.scenarios.measure import Measurement

    measured = Measurement("stopped rank (SIGSTOP)", "srun", 2, True, 1, detect_s=25.114, recovered=True,
                           recover_s=30.526, seconds_lost=0.4, extra={"error": "error: rank(s) 1 did not arrive"})
    record = fault_record(measured, "faults-fault-x", "stopped-rank")
    lines = (records.RECORDS_DIR / "faults.jsonl").read_text().splitlines()
    committed = next(rec for rec in map(json.loads, reversed(lines)) if rec["point"]["fault"] == measured.fault)
    assert records.validate(record) is None
    assert set(record) == set(committed) and set(record["metrics"]) == set(committed["metrics"])
    assert record["point"] == committed["point"] and record["error"] == "error: rank(s) 1 did not arrive"
    assert record["metrics"]["detect_s"] == 25.11 and record["metrics"]["recover_s"] == 30.53
    assert record["command"] == "python -m hpc_imagenet.harness.bench faults --only stopped-rank"
