"""The start-up timeline: each stage's seconds from the mark before it, the first from the process's own start
as the kernel recorded it."""
import os
import time

import pytest

from hpc_imagenet.imagenet.common import startup


def test_each_stage_is_the_time_since_the_mark_before_it():
    timeline = startup.Timeline(started=100.0)
    timeline.mark("imports", now=102.5)
    timeline.mark("data", now=103.0)
    timeline.mark("imports", now=110.0)  # a second mark of a stage does not move it
    timeline.mark("first step", now=104.25)
    assert timeline.breakdown() == {"stages": [{"stage": "imports", "s": 2.5}, {"stage": "data", "s": 0.5},
                                               {"stage": "first step", "s": 1.25}], "total_s": 4.25}


def test_the_clock_starts_when_the_process_did(tmp_path):
    # the command name may hold spaces and parentheses: fields are counted after its closing one
    stat, uptime = tmp_path / "stat", tmp_path / "uptime"
    ticks = 5 * os.sysconf("SC_CLK_TCK")  # started 5 s after boot...
    stat.write_text("42 (a (b) c) S " + " ".join(["0"] * 18) + f" {ticks} 0 0\n")
    uptime.write_text("12.50 20.00\n")  # ...and the machine has been up 12.5 s: the process is 7.5 s old
    assert time.time() - startup._process_start(stat, uptime) == pytest.approx(7.5, abs=0.5)
    assert startup._process_start(tmp_path / "absent", uptime) == startup._IMPORTED
    here = startup._process_start()  # this test process started before it ran, and not long before
    assert time.time() - 3600 < here <= time.time()
    assert here <= startup._IMPORTED + 1e-6 or here == pytest.approx(startup._IMPORTED, abs=0.02)
