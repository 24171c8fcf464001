"""The start budget of a generated batch file (hpc_imagenet/slurm/start_budget.py), run by bash for real: the whole
generated script, with SLURM's commands stood in by tiny scripts (srun runs its command here,
scontrol names one node) and a stand-in trainer that writes a newer checkpoint (a rename, as the
trainer does) on its first PROGRESS starts and then fails. The real SLURM and torchrun runs of the
same bounds are tests/cluster/test_slurm_recovery.py."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Tuple

import pytest

from hpc_imagenet.slurm import start_budget
from hpc_imagenet.slurm.generate import render, spec_from_args
from tests.helpers import REPO

FAKE_SRUN = '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n'  # drop srun's options
FAKE_SCONTROL = "#!/bin/sh\necho node1\n"
# Start N writes checkpoint N (a new file renamed over the old, of another size) while N <= PROGRESS.
TRAINER = """#!/bin/bash
n=$(( $(cat "$STAND_IN_COUNT" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$STAND_IN_COUNT"
echo "stand-in trainer start $n"
if [ "$n" -le "$PROGRESS" ]; then
    head -c "$n" /dev/zero > "$STAND_IN_RUN/.ckpt.tmp"
    mv "$STAND_IN_RUN/.ckpt.tmp" "$STAND_IN_RUN/checkpoint.pth.tar"
fi
exit "$STAND_IN_STATUS"
"""


def run_job(tmp: Path, progress: int, status: int = 1, trainer: str = TRAINER, requeue: bool = False,
            scancel: str = "#!/bin/sh\n", **settings: str) -> Tuple[str, int]:
    """Run a generated srun batch file to its end; (its log, its exit status)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("trainer", trainer), ("scancel", scancel)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = tmp / "job.sh"
    script.write_text(render(spec_from_args(["--name", "budget", "--gpus-per-node", "0", "--procs-per-node", "1",
                                             "--cpus-per-task", "1", "--launcher", "srun",
                                             *([] if requeue else ["--no-requeue"])])))
    run_dir = tmp / "run"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "budget",
           "SLURM_SUBMIT_DIR": str(REPO), "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_CPUS_PER_TASK": "1", "PYTHON": str(bin_dir / "trainer"), "LOG_DIR": str(run_dir),
           "STAND_IN_COUNT": str(tmp / "count"), "STAND_IN_RUN": str(run_dir), "PROGRESS": str(progress),
           "STAND_IN_STATUS": str(status), **settings}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    return proc.stdout + proc.stderr, proc.returncode


def starts(log: str) -> int:
    return len(re.findall(r"^stand-in trainer start \d+$", log, re.M))


def test_a_crash_at_start_starts_one_plus_max_restarts_times(tmp_path: Path) -> None:
    log, status = run_job(tmp_path, progress=0)
    assert status == 1 and starts(log) == 4, log
    restarts = re.findall(r"restarting it in this allocation from the newest checkpoint: (.*)$", log, re.M)
    assert restarts == [f"restart {k} of MAX_RESTARTS=3 without a newer checkpoint ({3 - k} left); start {k + 1} of "
                        f"MAX_STARTS=10 in this allocation ({9 - k} left)" for k in (1, 2, 3)], log
    assert re.findall(r"giving up: .*$", log, re.M) == [
        "giving up: the training failed with status 1 after 4 start(s) in a row without a newer checkpoint "
        "(MAX_RESTARTS=3); job restart 0; see the errors above"], log
    lines = (tmp_path / "run" / start_budget.STARTS_LOG).read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"7.0:{launch}:0" for launch in (1, 2, 3, 4)], lines
    assert all(line.split()[1] == "none" and line.split()[3] == "loop" for line in lines), lines


def test_a_run_that_writes_newer_checkpoints_keeps_its_budget(tmp_path: Path) -> None:
    """MAX_RESTARTS=1, five failures each after a newer checkpoint: all restarted; then two crashes at
    start from the fifth checkpoint end it (1 + MAX_RESTARTS starts without progress)."""
    log, status = run_job(tmp_path, progress=5, MAX_RESTARTS="1")
    assert status == 1 and starts(log) == 7, log
    assert log.count("the last start wrote a newer checkpoint, so MAX_RESTARTS=1 is whole again") == 5, log
    assert "restart 1 of MAX_RESTARTS=1 without a newer checkpoint (0 left); start 7 of MAX_STARTS=10" in log
    assert "after 2 start(s) in a row without a newer checkpoint (MAX_RESTARTS=1)" in log, log


def test_max_starts_bounds_a_run_that_always_progresses(tmp_path: Path) -> None:
    log, status = run_job(tmp_path, progress=100, MAX_STARTS="4")
    assert status == 1 and starts(log) == 4, log
    assert "after 4 start(s) in this allocation (MAX_STARTS=4)" in log, log


@pytest.mark.parametrize("status", [2, 75])
def test_a_user_error_or_a_preemption_is_never_restarted(tmp_path: Path, status: int) -> None:
    log, code = run_job(tmp_path, progress=0, status=status)
    assert code == status and starts(log) == 1 and "restarting" not in log, log


# The trainer signals the batch script (as SLURM does before the time limit) and finishes as soon as
# the script's trap has begun; the trap's scancel returns only once the trainer is gone (reaped by
# bash meanwhile), as a slow scancel does on a busy cluster.
FINISHING_TRAINER = """#!/bin/bash
echo $$ > "$STAND_IN_PID"
kill -USR2 $PPID
until [ -e "$LOG_DIR/stop.requested" ]; do sleep 0.01; done
exit 0
"""
SLOW_SCANCEL = """#!/bin/bash
while kill -0 "$(cat "$STAND_IN_PID")" 2>/dev/null; do sleep 0.01; done
"""


def test_a_run_that_ends_during_the_signals_trap_keeps_its_own_status(tmp_path: Path) -> None:
    """The trap interrupts `wait` (status 140); the trainer's own 0 must still decide: no requeue."""
    log, code = run_job(tmp_path, progress=0, trainer=FINISHING_TRAINER, requeue=True, scancel=SLOW_SCANCEL,
                        STAND_IN_PID=str(tmp_path / "trainer.pid"))
    assert "USR2: asking the training processes to checkpoint" in log, log
    assert code == 0 and "training exited with status 0" in log and "requeueing" not in log, log


def test_every_torchrun_worker_notes_its_start_and_the_first_says_which_bound(tmp_path: Path) -> None:
    """The worker wrapper torchrun runs: every worker notes its start (one start, however many note it);
    on a restart (TORCHELASTIC_RESTART_COUNT > 0) the first to note says which bound it counts against."""
    text = render(spec_from_args(["--gpus-per-node", "0", "--procs-per-node", "2", "--launcher", "torchrun"]))
    functions = text[text.index("# ---- start budget"):text.index("# ---- launch")]
    run_dir = tmp_path / "run"
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "9", "LOG_DIR": str(run_dir), "MAX_RESTARTS": "3",
           "MAX_STARTS": "10"}

    def worker(rank: str, restart: str) -> str:
        # through /bin/sh, as a site's python wrapper script may run it: the functions must survive it
        probe = (functions + f"LAUNCH=1\nexport WRAP={shlex.quote(start_budget.WORKER_WRAP)}\n"
                 """sh -c 'exec bash -c "$WRAP" echo "the worker ran:"'\n""")
        proc = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30,
                              env={**env, "RANK": rank, "TORCHELASTIC_RESTART_COUNT": restart,
                                   "TORCHELASTIC_MAX_RESTARTS": "3"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert worker("0", "0") == worker("1", "0") == "-u the worker ran:\n"
    first = worker("1", "1")
    assert re.fullmatch(r"\S+ torchrun restarts the workers \(its restart 1 of 3 in this launch\): restart 1 of "
                        r"MAX_RESTARTS=3 without a newer checkpoint \(2 left\); start 2 of MAX_STARTS=10 in this "
                        r"allocation \(8 left\)\n-u the worker ran:\n", first), first
    assert worker("0", "1") == "-u the worker ran:\n", "only the first to note says it"
    keys = [line.split()[0] for line in (run_dir / start_budget.STARTS_LOG).read_text().splitlines()]
    assert keys == ["9.0:1:0", "9.0:1:0", "9.0:1:1", "9.0:1:1"], keys


# ---------------------------------------------------------------------------------------------
# the time-limit signal's trap, armed while the script starts and counts its budget


def _armed_part(text: str) -> str:
    """The script from its trap on, without comments and single-quoted words (code that other
    shells run, such as `bash -c '...'`, whose signals are not this trap's)."""
    armed = text[text.index("\ntrap on_preempt "):]
    code = "\n".join(line for line in armed.splitlines() if not line.lstrip().startswith("#"))
    return re.sub(r"'[^'\n]*'", "''", code)


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "launch", "mpi"])
def test_the_armed_script_substitutes_commands_with_backticks(launcher: str) -> None:
    """bash 5.2 breaks a $(...) when the trapped signal arrives while it re-parses it (the next test)."""
    text = render(spec_from_args(["--nodes", "2", "--gpus-per-node", "0", "--launcher", launcher]))
    armed = _armed_part(text)
    assert "`date -Is`" in armed and "`checkpoint_id`" in armed
    assert re.findall(r"\$\((?!\()[^\n]*", armed) == [], "a $(...) after the trap"


def test_a_storm_of_time_limit_signals_breaks_nothing_during_start_up(tmp_path: Path) -> None:
    """The generated start-up, from the trap through the budget's functions, then the budget counts and
    notes of the launch loop over and over, while 400 time-limit signals arrive 5 ms apart. Before the
    script used backticks, bash 5.2 broke a $(...) here in every run ("unexpected EOF while looking for
    matching `)'"), which ended the function it was in."""
    text = render(spec_from_args(["--name", "storm", "--gpus-per-node", "0", "--launcher", "srun"]))
    start_up = text[text.index("\npreempted=0\n"):text.index("# ---- launch")]
    storm = ("( k=0; while [ $k -lt 400 ] && kill -USR2 $$; do k=$((k + 1)); sleep 0.005; done ) &\nstorm=$!\n"
             "i=0\nwhile kill -0 $storm 2>/dev/null; do\n    i=$((i + 1)); LAUNCH=$i\n    start_budget\n"
             '    note_start "$ALLOCATION:$LAUNCH:0" loop\n    budget_note > /dev/null; budget_spent > /dev/null\n'
             'done\necho "storm over after $i counts: preempted=$preempted"\n')
    run_dir = tmp_path / "run"
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "storm", "LOG_DIR": str(run_dir),
           "PYTHON": "python3", "MAX_RESTARTS": "3", "MAX_STARTS": "100000"}
    proc = subprocess.run(["bash", "-c", start_up + storm], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    over = re.search(r"^storm over after (\d+) counts: preempted=1$", proc.stdout, re.M)
    assert over, proc.stdout[-2000:]
    assert proc.stdout.count("USR2: asking the training processes to checkpoint") > 100, "the storm reached the trap"
    lines = (run_dir / start_budget.STARTS_LOG).read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"7.0:{k}:0" for k in range(1, int(over[1]) + 1)]
    assert all(re.fullmatch(r"\S+ none \d{4}-\d\d-\d\dT\S+ loop", line) for line in lines), lines[:5]
