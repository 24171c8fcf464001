"""Stop signals are never lost or late: one that comes in an epoch's last print interval (or during
validation) stops the run right after the epoch's checkpoint; one that comes while a trainer
starts waits, pending, for its handler (hpc_imagenet.launch.agent holds it back for torchrun's workers); and
progress lines end in \\r only on a real terminal, never in a collected log."""
from __future__ import annotations

import os
import signal
import subprocess
from unittest import mock

import torch

from hpc_imagenet.imagenet.common.terminal import overwrite_progress
from tests.helpers import PYTHON, REPO, TINY, child_env, explain, read_run, script
from tests.warm_start import warm_python

SEEDED = [*TINY, "--seed", "7", "--deterministic"]
STOP = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM}


def _ckpt(run_dir):
    return torch.load(run_dir / "checkpoint.pth.tar", weights_only=True)


def _read_until(proc, text: str) -> str:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never printed; got:\n{''.join(seen)[-3000:]}")


def _resume_finishes(run_dir, data, epochs: int) -> None:
    again = warm_python(script("imagenet_nd.py"), *SEEDED, "-p", "100", "--epochs", str(epochs), "--resume", "auto",
                   "--log-dir", run_dir, data)
    assert again.returncode == 0, explain(again)
    assert [row["epoch"] for row in read_run(run_dir)["epochs"]] == list(range(epochs))
    assert _ckpt(run_dir)["scheduler"]["last_epoch"] == epochs * 6, "every step trained exactly once"


def test_signal_without_a_print_boundary_left_stops_after_the_epoch_checkpoint(jpeg_data, tmp_path):
    """-p 100: an epoch's only print boundary is its last step, where the old loop never checked."""
    args = [PYTHON, script("imagenet_nd.py"), *SEEDED, "-p", "100", "--epochs", "3", "--log-dir", str(tmp_path),
            str(jpeg_data)]
    proc = subprocess.Popen(args, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _read_until(proc, "=> run folder")  # the handler is in place; epoch 0 has not ended
        proc.send_signal(signal.SIGUSR2)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 75, f"exit {proc.returncode}\n{out}\n{err}"
    ckpt = _ckpt(tmp_path)
    assert ckpt["step_in_epoch"] == 0 and 1 <= ckpt["epoch"] < 3, (ckpt["epoch"], ckpt["step_in_epoch"])
    assert f"checkpoint saved at epoch {ckpt['epoch']} step 0" in out
    assert read_run(tmp_path)["status"] == "preempted"
    assert len(read_run(tmp_path)["epochs"]) == ckpt["epoch"], "stopped right after the checkpointed epoch"
    _resume_finishes(tmp_path, jpeg_data, 3)


def _block_stop_signals() -> None:  # what a trainer inherits from hpc_imagenet.launch.agent
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)


def test_signal_during_start_up_waits_for_the_handler(jpeg_data, tmp_path):
    """Sent before the trainer has imported anything: it stays pending and is acted on at the first
    safe point (the old trainer never unblocked it and trained to the end)."""
    args = [PYTHON, script("imagenet_nd.py"), *SEEDED, "-p", "1", "--epochs", "2", "--log-dir", str(tmp_path),
            str(jpeg_data)]
    proc = subprocess.Popen(args, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_block_stop_signals)
    try:
        proc.send_signal(signal.SIGTERM)  # what `scontrol requeue` sends to every process of the job
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 75, f"exit {proc.returncode}\n{out}\n{err}"
    assert "stop signal (SIGTERM): checkpoint saved at epoch 0 step 1" in out
    _resume_finishes(tmp_path, jpeg_data, 2)


def _mask(status: str, field: str) -> int:
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":")), 16)


def test_launch_agent_hands_its_workers_stop_signals_blocked_not_ignored():
    """torchrun under hpc_imagenet.launch.agent, as the generated batch files start it (after `trap ""`)."""
    cmd = ['trap "" USR2 TERM; exec "$0" -m hpc_imagenet.launch.agent torch.distributed.run --standalone '
           '--nproc_per_node=1 '
           '--no-python cat /proc/self/status', PYTHON]
    proc = subprocess.run(["bash", "-c", *cmd], cwd=REPO, env=child_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, explain(proc)
    wanted = sum(1 << (s - 1) for s in STOP)
    assert _mask(proc.stdout, "SigBlk") & wanted == wanted, proc.stdout
    assert _mask(proc.stdout, "SigIgn") & wanted == 0, proc.stdout


def test_progress_overwrites_a_line_only_on_an_interactive_terminal():
    with mock.patch("sys.stdout.isatty", return_value=True):
        for env, expected in (({"TERM": "xterm"}, True), ({"TERM": "dumb"}, False), ({}, False),
                              ({"TERM": "xterm", "SLURM_JOB_ID": "7"}, False),
                              ({"TERM": "xterm", "OMPI_COMM_WORLD_SIZE": "2"}, False),
                              ({"TERM": "xterm", "PMI_SIZE": "2"}, False)):
            with mock.patch.dict(os.environ, env, clear=True):
                assert overwrite_progress() is expected, env
    with mock.patch("sys.stdout.isatty", return_value=False), mock.patch.dict(os.environ, {"TERM": "xterm"}):
        assert overwrite_progress() is False
