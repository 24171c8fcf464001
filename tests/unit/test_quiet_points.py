"""A point counts only when the machine was quiet while it ran: the other processes' share of the machine's CPU
time, measured for real (a busy process outside this one's tree) and in closed form; a crowded point is listed in
its tag's report and left out of its figures and tables."""
import os
import subprocess
import sys

import pytest

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import cluster
from tests.helpers import REPORT_ENV as ENV
from tests.helpers import train_record as _train
from tests.helpers import write_records as _write

BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def test_other_work_is_the_machines_busy_time_less_this_process_tree(monkeypatch):
    machine = iter([(100.0, 400.0), (160.0, 500.0)])  # 60 busy CPU seconds of 100
    tree = iter([10.0, 60.0])  # of which this process and its children: 50
    monkeypatch.setattr(cputime, "machine_cpu_s", lambda: next(machine))
    monkeypatch.setattr(cputime, "process_tree_cpu_s", lambda: next(tree))
    assert cputime.OtherWork().share() == pytest.approx(0.10)
    # the race's run: 90 busy seconds of 200, the run's 68 and the harness's 2 leave 20 for others, a tenth
    machine, tree = iter([(100.0, 400.0), (190.0, 600.0)]), iter([1.0, 71.0])
    assert cputime.OtherWork().share() == pytest.approx(0.10)
    machine, tree = iter([(100.0, 400.0), (190.0, 600.0)]), iter([1.0, 103.0])  # the tree used more than was busy
    assert cputime.OtherWork().share() == 0.0
    machine, tree = iter([(100.0, 400.0), (100.2, 400.5)]), iter([10.0, 10.1])  # half a CPU second: noise
    assert cputime.OtherWork().share() is None


def test_the_machine_time_is_read_from_proc_stat():
    busy, total = cputime.machine_cpu_s()
    assert 0 < busy < total


def test_a_busy_process_outside_the_tree_is_other_work():
    """A CPU-bound process this test starts and lets go of (its parent shell exits at once, so it is no
    descendant) is measured as other work; pytest's other workers can only add to it. The pipe's end of file,
    when the orphan exits, is what this process waits for."""
    others = cputime.OtherWork()
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{BUSY.format(s=1.5)}' &"], stdout=subprocess.PIPE, check=True)
    assert others.share() > 0.8 / os.cpu_count()  # one busy core of the machine for most of the time


def test_crowded_and_migrated_points_do_not_count():
    def rec(**extra):
        return kinds.from_dict({**_train("s", 1, 100.0), **extra})
    assert rec().counted() and rec(other_cpu_share=0.10).counted() and rec(other_cpu_share=0.5).counted(1.0)
    assert not rec(other_cpu_share=0.11).counted() and not rec(not_counted="host load 8.2 on 2 cores").counted()


def test_a_crowded_point_is_listed_and_left_out_of_the_figures(tmp_path):
    recs = [_train("c-train-1", n, 100.0 * n) for n in (1, 2)]
    recs.append(dict(_train("c-train-1", 4, 150.0), other_cpu_share=0.5))
    readme, head = cluster.build_tag("c", _write(tmp_path / "c.jsonl", recs), tmp_path / "c")
    text = readme.read_text()
    throughput = text.split("## Training throughput", 1)[1].split("\n## ", 1)[0]
    assert "c.jsonl:3" not in throughput and "c.jsonl:2" in throughput
    uncounted = text.split("## Points not counted", 1)[1].split("\n## ", 1)[0]
    assert "other processes used 50.0% of the CPU" in uncounted and "c.jsonl:3" in uncounted
    assert head["uncounted"] == 1 and head["records"] == 3


def test_a_sweep_measures_each_points_other_work(tmp_path):
    """A point's share is measured over its stretch; points recorded together (as a lockstep bench records its
    backends) share it, instead of a share over the milliseconds between two appends."""
    sweep = records.Sweep("io", "t", tmp_path / "r.jsonl", ENV)
    point = {"backend": "pil", "workers": 0, "readers": 1, "cache": "warm"}
    subprocess.run([sys.executable, "-c", BUSY.format(s=1.0)], check=True)  # the point's own work, a child's
    first, second = sweep.add(point, {}, "failed", "boom"), sweep.add(point, {}, "failed", "boom")
    assert 0.0 <= first["other_cpu_share"] <= 1.0 and second["other_cpu_share"] == first["other_cpu_share"]
    assert [r["other_cpu_share"] for r in records.load([tmp_path / "r.jsonl"])[0]] == [first["other_cpu_share"]] * 2
