"""The background checkpoint writer: host snapshots that the next optimizer step cannot change, the
last K kept, --resume auto's fallback past a damaged newest file, and a failed write raised."""
import os

import pytest
import torch

from hpc_imagenet.imagenet.train import checkpoint, checkpoint_writer
from hpc_imagenet.imagenet.train.checkpoint_writer import BackgroundWriter, to_host


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
        writer.save(lambda epoch=epoch, step=step, i=i: _state(epoch, step, i))
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


def test_only_rank_0_writes_checkpoints(tmp_path):
    """The other ranks' writer never asks for the state (no snapshot, no write) and has nothing to wait on."""
    quiet = checkpoint_writer.for_rank(False, tmp_path, 2)
    quiet.save(lambda: 1 / 0)
    quiet.save_now(lambda: 1 / 0)
    quiet.check()
    quiet.wait()
    assert list(tmp_path.iterdir()) == [] and quiet.stats.as_dict()["saves"] == 0
    assert isinstance(checkpoint_writer.for_rank(True, tmp_path, 2), BackgroundWriter)
