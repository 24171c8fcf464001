"""The requeue contract in one process, as the batch files run a script (python -m hpc_imagenet.requeue): a stop
signal during the script's imports is kept and stops it at its first question; the marks and exit statuses the
batch file reads; a script that ignores a stop is ended after the grace, with the reason in one line."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.helpers import PYTHON, REPO, child_env

ASKS = """import time, pathlib, sys
pathlib.Path(sys.argv[1]).touch()          # importing now
time.sleep(float(sys.argv[2]))             # a slow import: the signal comes here
from hpc_imagenet import requeue
assert requeue.latest() is None
if requeue.should_stop():
    requeue.save({"step": 0})
    requeue.stop()
print("never stopped")
"""
IGNORES = """import time
print("running", flush=True)
while True:
    time.sleep(0.1)
"""


def _start(tmp_path: Path, text: str, *args: str, **env: str) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(text)
    return subprocess.Popen([PYTHON, "-m", "hpc_imagenet.requeue", str(script), *args], cwd=REPO, text=True,
                            env=child_env(HPC_IMAGENET_RUN_DIR=str(tmp_path / "run"), **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_signal_during_the_imports_stops_the_script_at_its_first_question(tmp_path: Path) -> None:
    importing = tmp_path / "importing"
    proc = _start(tmp_path, ASKS, str(importing), "3")
    deadline = time.monotonic() + 60
    while not importing.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75 and "never stopped" not in out, err
    run = tmp_path / "run"
    assert (run / "checkpoint.pth.tar").is_file() and "SIGUSR2" in (run / "requeue.requested").read_text()


def test_a_script_that_ignores_a_stop_is_ended_after_the_grace(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    proc = _start(tmp_path, IGNORES, HPC_IMAGENET_STOP_GRACE="2")
    assert proc.stdout.readline() == "running\n"
    started = time.monotonic()
    (tmp_path / "run" / "stop.requested").touch()  # what the batch file writes at the signal
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and 2 <= time.monotonic() - started < 30
    (line,) = err.splitlines()
    assert "did not stop within 2 s of the stop request" in line and "not requeued" in line
    assert (tmp_path / "run" / "stop.ignored").exists()
    again = _start(tmp_path, IGNORES)  # a launcher starting it again in the same allocation: refused at once
    assert again.wait(timeout=60) == 3
