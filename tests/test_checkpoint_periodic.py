"""Periodic checkpoints written in the background, a crash in mid-write, resume from the newest one,
and stragglers named at run time (real processes, real torchrun, real files)."""
import os
import signal
import subprocess
import time

import pytest
import torch

from imagenet import checkpoint
from imagenet.checkpoint_writer import BackgroundWriter, to_host
from tests.helpers import BIN, PYTHON, REPO, TINY, child_env, explain, python, read_run, run, script

SEEDED = [*TINY, "--seed", "7", "--deterministic", "-p", "3"]


def test_host_snapshot_is_a_copy_that_the_next_optimizer_step_does_not_change():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for _ in range(2):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    snap = to_host({"model": model.state_dict(), "optimizer": opt.state_dict()})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    momentum = opt.state_dict()["state"][0]["momentum_buffer"].clone()
    model(torch.randn(3, 4)).sum().backward()
    opt.step()  # changes the live tensors in place
    assert not torch.equal(model.weight, before["weight"])
    for key, tensor in before.items():
        assert torch.equal(snap["model"][key], tensor)
    assert torch.equal(snap["optimizer"]["state"][0]["momentum_buffer"], momentum)
    assert hasattr(snap["model"], "_metadata"), "load_state_dict's per-module versions were dropped"
    again = to_host({"model": model.state_dict(), "optimizer": opt.state_dict()}, reuse=snap)
    assert again["model"]["weight"].data_ptr() == snap["model"]["weight"].data_ptr(), "memory not reused"
    assert torch.equal(again["model"]["weight"], model.weight)
    assert again["model"]["weight"].data_ptr() != model.weight.data_ptr()


def _state(epoch, step, value):
    return {"epoch": epoch, "step_in_epoch": step, "global_batch": 16, "w": torch.full((4,), float(value))}


def test_writer_keeps_the_last_k_and_resume_falls_back_past_a_damaged_newest(tmp_path):
    writer = BackgroundWriter(tmp_path, keep=2)
    for i, (epoch, step) in enumerate([(0, 5), (0, 10), (1, 0), (1, 5)]):
        writer.save(lambda: _state(epoch, step, i))
    writer.wait()
    assert [p.name for p in checkpoint.kept(tmp_path)] == ["checkpoint-e0001-00000000000.pth.tar",
                                                           "checkpoint-e0001-00000000080.pth.tar"]
    assert os.path.samefile(tmp_path / checkpoint.CHECKPOINT, checkpoint.kept(tmp_path)[-1])
    assert writer.stats.as_dict()["saves"] == 4 and writer.stats.bytes > 0

    (tmp_path / checkpoint.CHECKPOINT).unlink()
    (tmp_path / checkpoint.CHECKPOINT).write_bytes(b"torn")  # what a non-atomic rename could leave
    checkpoint.kept(tmp_path)[-1].write_bytes(b"torn too")
    path, ckpt = checkpoint.load_for_resume("auto", tmp_path)
    assert path.name == "checkpoint-e0001-00000000000.pth.tar" and ckpt["w"][0] == 2


def test_a_failed_background_write_is_raised_at_the_next_checkpoint(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    writer = BackgroundWriter(blocker, keep=2)
    writer.save(lambda: _state(0, 1, 0))
    with pytest.raises(checkpoint.CheckpointError, match="cannot write checkpoint"):
        writer.save(lambda: _state(0, 2, 0))
    writer.save(lambda: _state(0, 3, 0))
    writer._thread.join()  # the write has ended: check() raises without waiting
    with pytest.raises(checkpoint.CheckpointError, match="cannot write checkpoint"):
        writer.check()
    writer.check()  # raised once


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
    a = python(script("imagenet_nd.py"), *SEEDED, *every, "--log-dir", straight, jpeg_data)
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

    again = python(script("imagenet_nd.py"), *SEEDED, *every, "--resume", "auto", "--log-dir", crashed, jpeg_data)
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
    # 0.001 minutes (60 ms, less than a step here): due at every print boundary inside the epoch
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"), *TINY,
                "--epochs", "1", "-p", "1", "--checkpoint-every-minutes", "0.001", "--keep-checkpoints", "5",
                "--log-dir", tmp_path, jpeg_data])
    assert proc.returncode == 0, explain(proc)
    assert read_run(tmp_path)["checkpoints"]["periodic"] == 2  # 3 steps of 2 x 8 images: after steps 1 and 2
    assert [p.name for p in checkpoint.kept(tmp_path)] == [
        "checkpoint-e0000-00000000016.pth.tar", "checkpoint-e0000-00000000032.pth.tar",
        "checkpoint-e0001-00000000000.pth.tar"]


def test_a_slowed_rank_is_named_in_the_log_and_in_run_json(jpeg_data, tmp_path):
    env = child_env(SLOW_RANK="1", SLOW_DELAY_S="1.0")
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", REPO / "tests" / "slow_rank_entry.py",
                *TINY, "--epochs", "1", "-p", "1", "--val-steps", "1", "--log-dir", tmp_path, jpeg_data], env=env)
    assert proc.returncode == 0, explain(proc)
    assert "straggler: rank 1 on " in proc.stderr, explain(proc)
    assert "straggler: rank 0 " not in proc.stderr
    ranks = read_run(tmp_path)["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[1]["slowest_intervals"] >= 1 and ranks[0]["slowest_intervals"] == 0
    assert ranks[1]["data_ms_mean"] > ranks[0]["data_ms_mean"] + 500
