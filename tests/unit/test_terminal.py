"""The one progress display (hpc_imagenet.imagenet.common.terminal.ProgressLine) on a real pseudo-terminal and in a
log file: a redrawn line on the one, plain lines (throttled) in the other."""
from __future__ import annotations

import logging
import os

import pytest

from hpc_imagenet.imagenet.common import terminal
from hpc_imagenet.imagenet.common.terminal import ProgressLine


def _read_lines(leader: int, lines: int = 1) -> str:
    """What the terminal received, up to its LINES-th newline (the pty hands it over in pieces)."""
    out = b""
    while out.count(b"\n") < lines:
        out += os.read(leader, 4096)
    os.close(leader)
    return out.decode().replace("\r\n", "\n")  # the terminal's own newline translation


@pytest.fixture
def interactive(monkeypatch):
    for name in terminal.COLLECTED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")


def test_a_terminal_gets_one_redrawn_line_ended_by_the_final_update(interactive):
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        line = ProgressLine(tty)
        assert line.live
        line.show("1/3 shards")
        line.show("2/3 shards")
        line.show("3/3 shards", final=True)
    assert _read_lines(leader) == "1/3 shards\033[K\r2/3 shards\033[K\r3/3 shards\033[K\n"


def test_a_display_stopped_early_ends_its_line(interactive):
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        line = ProgressLine(tty)
        line.show("step 5/100")
        line.close()
        line.close()  # once only
    assert _read_lines(leader) == "step 5/100\033[K\r\n"


def test_a_log_gets_plain_lines_at_most_one_per_interval(tmp_path, interactive):
    with open(tmp_path / "job.log", "w") as log:
        line = ProgressLine(log, every=3600)
        assert not line.live
        line.show("too early")  # the first plain line comes an interval after the start
        line.last -= 3600
        line.show("due")
        line.show("too soon again")
        line.show("done", final=True)
        line.close()
    assert (tmp_path / "job.log").read_text() == "due\ndone\n"


def test_a_terminal_inside_a_slurm_job_gets_plain_lines(interactive, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        line = ProgressLine(tty)
        line.show("a")
        line.show("b", final=True)
    out = _read_lines(leader, 2)
    assert not line.live and "\033" not in out and out.splitlines() == ["a", "b"]


def test_only_rank_0s_console_shows(capsys, caplog):
    log = logging.getLogger("test.console")
    for primary in (False, True):
        shown = terminal.console(primary, log)
        shown.say("said")
        shown.warn("warned %d", 3)
        shown.progress("step 1/1", final=True)
        shown.end_progress()
    out = capsys.readouterr().out
    assert out.count("said") == 1 and out.count("step 1/1") == 1
    assert [r.getMessage() for r in caplog.records if r.name == "test.console"] == ["warned 3"]
