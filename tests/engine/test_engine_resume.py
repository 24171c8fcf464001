"""Resume equality, preemption mid-epoch, and the --desired-acc stop."""
import signal
import subprocess
import time

import torch

from tests.helpers import PYTHON, REPO, TINY, child_env, explain, read_run, script
from tests.warm_start import warm_python

SEEDED = [*TINY, "--seed", "7", "--deterministic", "-p", "1"]


def _weights(run_dir):
    return torch.load(run_dir / "checkpoint.pth.tar", weights_only=True)


def test_resumed_run_matches_uninterrupted_run_exactly(jpeg_data, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    a = warm_python(script("imagenet_nd.py"), *SEEDED, "--epochs", "2", "--log-dir", straight, jpeg_data)
    assert a.returncode == 0, explain(a)
    b1 = warm_python(script("imagenet_nd.py"), *SEEDED, "--epochs", "1", "--log-dir", split, jpeg_data)
    assert b1.returncode == 0, explain(b1)
    b2 = warm_python(script("imagenet_nd.py"), *SEEDED, "--epochs", "2", "--resume", "auto", "--log-dir", split,
                jpeg_data)
    assert b2.returncode == 0, explain(b2)
    assert "resumed from" in b2.stdout
    wa, wb = _weights(straight), _weights(split)
    assert wa["epoch"] == wb["epoch"] == 2
    for key, tensor in wa["model"].items():
        assert torch.equal(tensor, wb["model"][key]), f"{key} differs after resume"
    assert wa["scheduler"]["last_epoch"] == wb["scheduler"]["last_epoch"]
    assert torch.equal(wa["rng"]["torch"], wb["rng"]["torch"])


def _wait_for_line(proc, text, deadline_s=120):
    """Read the child's stdout until TEXT appears (returns what was read)."""
    seen, end = [], time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never printed; got:\n{''.join(seen)[-3000:]}")


def test_stop_signal_checkpoints_mid_epoch_and_resume_trains_nothing_twice(jpeg_data, tmp_path):
    args = [PYTHON, script("imagenet_nd.py"), *SEEDED, "--epochs", "2", "--log-dir", str(tmp_path), str(jpeg_data)]
    proc = subprocess.Popen(args, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for_line(proc, "Epoch: [0][2/6]")
        proc.send_signal(signal.SIGUSR1)  # what sbatch --signal=USR1@T delivers
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 75, f"exit {proc.returncode}\n{out}\n{err}"
    assert "checkpoint saved at epoch 0" in out
    ckpt = _weights(tmp_path)
    stopped_at = ckpt["step_in_epoch"]
    assert ckpt["epoch"] == 0 and 2 <= stopped_at < 6
    assert read_run(tmp_path)["status"] == "preempted"

    again = warm_python(script("imagenet_nd.py"), *SEEDED, "--epochs", "2", "--resume", "auto", "--log-dir", tmp_path,
                   jpeg_data)
    assert again.returncode == 0, explain(again)
    assert f"Epoch: [0][{stopped_at + 1}/6]" in again.stdout  # continues after the last saved step
    assert f"Epoch: [0][{stopped_at}/6]" not in again.stdout
    final = _weights(tmp_path)
    assert final["scheduler"]["last_epoch"] == 2 * 6, "every step trained exactly once"
    assert [row["epoch"] for row in read_run(tmp_path)["epochs"]] == [0, 1]


def test_desired_accuracy_stops_training_early(learnable_data, tmp_path):
    proc = warm_python(script("imagenet_ddp.py"), *TINY, "--epochs", "12", "--lr", "0.8", "--desired-acc", "70",
                  "--seed", "0", "--log-dir", tmp_path, learnable_data, timeout=600)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["status"] == "reached_desired_acc" and record["final"]["reached_desired_acc"]
    assert record["final"]["epochs_run"] < 12
    assert record["epochs"][-1]["val_top1"] >= 70.0
    assert all(row["val_top1"] < 70.0 for row in record["epochs"][:-1])
    assert "Reached desired accuracy" in proc.stdout and "s of training" in proc.stdout
    ckpt = _weights(tmp_path)
    assert ckpt["elapsed_s"] > 0 and ckpt["epoch"] == record["final"]["epochs_run"]
