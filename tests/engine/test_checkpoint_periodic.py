"""Periodic checkpoints in real training runs: a kill -9 in mid-write, resume from the newest one, a
stop signal after them, the minutes interval under torchrun, and a slowed rank named at run time."""
import signal
import subprocess
import time

import torch

from hpc_imagenet.imagenet.train import checkpoint
from tests.helpers import BIN, PYTHON, REPO, TINY, child_env, explain, read_run, run, script
from tests.warm_start import warm_python

SEEDED = [*TINY, "--seed", "7", "--deterministic", "-p", "3"]


def _kill_in_mid_write(proc, run_dir, deadline_s=300):
    """SIGKILL the trainer while a checkpoint's temp file is being written (the rename not yet done),
    one that would replace an earlier checkpoint."""
    end = time.monotonic() + deadline_s
    while proc.poll() is None and time.monotonic() < end:
        if (run_dir / checkpoint.CHECKPOINT).exists() and any(run_dir.glob(".checkpoint.pth.tar.*.tmp")):
            proc.send_signal(signal.SIGSTOP)  # freeze every thread, then look again
            if any(run_dir.glob(".checkpoint.pth.tar.*.tmp")):
                proc.kill()
                proc.wait()
                return
            proc.send_signal(signal.SIGCONT)  # the write finished in between: catch the next one
        time.sleep(0.002)  # polling the folder, not synchronisation
    raise AssertionError(f"no checkpoint write caught in flight (exit {proc.poll()})")


def test_kill_in_mid_write_keeps_the_previous_checkpoint_and_the_resume_is_exact(jpeg_data, tmp_path):
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    every = ["--checkpoint-every-steps", "2", "--epochs", "2"]
    a = warm_python(script("imagenet_nd.py"), *SEEDED, *every, "--log-dir", straight, jpeg_data)
    assert a.returncode == 0, explain(a)
    assert read_run(straight)["checkpoints"]["periodic"] == 4  # steps 2 and 4 of both 6-step epochs

    proc = subprocess.Popen([PYTHON, script("imagenet_nd.py"), *SEEDED, *every, "--log-dir", str(crashed),
                             str(jpeg_data)], cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _kill_in_mid_write(proc, crashed)
    finally:
        proc.kill()
    assert any(crashed.glob(".checkpoint.pth.tar.*.tmp")), "the kill came after the write"
    saved = checkpoint.load(crashed / checkpoint.CHECKPOINT)  # the previous one, whole
    position = (saved["epoch"], saved["step_in_epoch"])

    again = warm_python(script("imagenet_nd.py"), *SEEDED, *every, "--resume", "auto", "--log-dir", crashed, jpeg_data)
    assert again.returncode == 0, explain(again)
    assert f"resumed from {crashed / checkpoint.CHECKPOINT}: epoch {position[0]}, step {position[1]}" in again.stdout
    assert not list(crashed.glob(".*.tmp")), "the killed write's temp file was left behind"
    wa = torch.load(straight / checkpoint.CHECKPOINT, weights_only=True)
    wb = torch.load(crashed / checkpoint.CHECKPOINT, weights_only=True)
    assert wb["scheduler"]["last_epoch"] == 12, "every step trained exactly once"
    for key, tensor in wa["model"].items():
        assert torch.equal(tensor, wb["model"][key]), f"{key} differs after the crash and resume at {position}"


def test_stop_signal_after_a_periodic_checkpoint_still_checkpoints_at_once(jpeg_data, tmp_path):
    args = [PYTHON, script("imagenet_nd.py"), *TINY, "-p", "1", "--checkpoint-every-steps", "1", "--epochs", "2",
            "--log-dir", str(tmp_path), str(jpeg_data)]
    proc = subprocess.Popen(args, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:
            if "Epoch: [0][2/6]" in line:
                proc.send_signal(signal.SIGUSR1)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 75, f"exit {proc.returncode}\n{out}\n{err}"
    ckpt = checkpoint.load(tmp_path / checkpoint.CHECKPOINT)
    assert f"checkpoint saved at epoch 0 step {ckpt['step_in_epoch']}" in out
    assert ckpt["epoch"] == 0 and ckpt["step_in_epoch"] >= 2
    assert not list(tmp_path.glob(".*.tmp")), "a write was left unfinished"


def test_minutes_interval_checkpoints_at_print_boundaries_under_torchrun(jpeg_data, tmp_path):
    # 0.00001 minutes (0.6 ms, far less than any step with its all-reduce): due at every print boundary
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"), *TINY,
                "--epochs", "1", "-p", "1", "--checkpoint-every-minutes", "0.00001", "--keep-checkpoints", "5",
                "--log-dir", tmp_path, jpeg_data])
    assert proc.returncode == 0, explain(proc)
    assert read_run(tmp_path)["checkpoints"]["periodic"] == 2  # 3 steps of 2 x 8 images: after steps 1 and 2
    assert [p.name for p in checkpoint.kept(tmp_path)] == [
        "checkpoint-e0000-00000000016.pth.tar", "checkpoint-e0000-00000000032.pth.tar",
        "checkpoint-e0001-00000000000.pth.tar"]


def test_a_slowed_rank_is_named_in_the_log_and_in_run_json(jpeg_data, tmp_path):
    env = child_env(SLOW_RANK="1", SLOW_DELAY_S="1.0")
    entry = REPO / "tests" / "engine" / "slow_rank_entry.py"
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", entry, *TINY, "--epochs", "1", "-p", "1",
                "--val-steps", "1", "--log-dir", tmp_path, jpeg_data], env=env)
    assert proc.returncode == 0, explain(proc)
    assert "straggler: rank 1 on " in proc.stderr, explain(proc)
    assert "straggler: rank 0 " not in proc.stderr
    ranks = read_run(tmp_path)["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[1]["slowest_intervals"] >= 1 and ranks[0]["slowest_intervals"] == 0
    assert ranks[1]["data_ms_mean"] > ranks[0]["data_ms_mean"] + 500
