"""RESULTS.md's fault table: one row per fault from its newest sweep, median and maximum time to
detect, sums of steps trained twice and checkpoints lost; failed runs listed with their error."""
from results import report
from results.core import records
from results.report import faults as faults_report

ENV = {"hostname": "node1", "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.x", "nodes": 2}


def _fault(sweep, fault, detect, twice, survived=1):
    metrics = {"survived": survived, "steps_trained_twice": twice, "checkpoints_lost": 0}
    if detect is not None:
        metrics["detect_s"] = detect
    return records.make_record("fault", sweep, {"fault": fault, "launcher": "srun", "nodes": 2}, metrics, ENV)


def test_table_rows_come_from_the_newest_sweep_of_each_fault(tmp_path):
    recs = [_fault("old", "kill -9", 99.0, 50), _fault("new", "kill -9", 4.0, 3), _fault("new", "kill -9", 6.0, 3),
            _fault("new", "kill -9", 5.0, 2), _fault("new", "disk full", None, 3),
            records.make_record("fault", "new", {"fault": "network loss"}, {}, ENV, status="failed",
                                error="timed out after 60s waiting for rank 0's one-line error")]
    path = tmp_path / "faults.jsonl"
    for r in recs:
        records.append(path, r)
    out, problems = report.build([path], tmp_path)
    assert not problems
    text = out.read_text()
    assert "## Fault tolerance" in text
    rows = {r[0]: r for r in faults_report.rows(records.load([path])[0])}
    assert rows["kill -9"][3:9] == [3, 3, 5.0, 6.0, 8, 0]  # injected, survived, median, max, twice, lost
    assert rows["disk full"][5:7] == [None, None]
    assert "| kill -9 | srun | 2 | 3 | 3 | 5 | 6 | 8 | 0 |" in text
    assert "network loss: timed out after 60s" in text


def test_no_fault_records_no_section():
    assert faults_report.section([]) == ""
