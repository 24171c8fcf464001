"""Learning-rate schedule, atomic checkpoints and file writes, samplers and error messages, in-process."""
import os
import stat

import pytest
import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.common import errors, files
from hpc_imagenet.imagenet.train import checkpoint, optim
from hpc_imagenet.imagenet.data import samplers
from hpc_imagenet.imagenet.common.errors import one_line


def _cfg(*argv):
    return config.parse(["--dummy", *argv], "ddp").optim


def test_linear_scaling_and_default_warmup():
    cfg = _cfg("--lr", "0.1")
    assert optim.peak_lr(cfg, 1024) == pytest.approx(0.4)
    assert optim.warmup_epochs(cfg, 0.4) == 5.0 and optim.warmup_epochs(cfg, 0.1) == 0.0
    assert optim.peak_lr(_cfg("--lr-scaling", "none"), 1024) == 0.1


def test_step_schedule_with_warmup():
    cfg = _cfg("--lr-steps", "3", "6")
    f = lambda it: optim.lr_factor(it, 10, cfg, warmup=1.0)  # noqa: E731
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(25) == 1.0 and f(30) == pytest.approx(0.1) and f(65) == pytest.approx(0.01)


def test_cosine_schedule_ends_at_zero():
    cfg = _cfg("--lr-schedule", "cosine", "--epochs", "10")
    assert optim.lr_factor(0, 10, cfg, 0.0) == pytest.approx(1.0)
    assert optim.lr_factor(50, 10, cfg, 0.0) == pytest.approx(0.5)
    assert optim.lr_factor(100, 10, cfg, 0.0) == pytest.approx(0.0, abs=1e-12)


def test_no_bn_weight_decay_groups():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=True), torch.nn.BatchNorm2d(4))
    decay, no_decay = optim.param_groups(model, 1e-4, no_bn_wd=True)
    assert len(decay["params"]) == 1 and len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_crash_during_checkpoint_write_keeps_the_last_good_one(tmp_path):
    checkpoint.save({"epoch": 1, "w": torch.ones(3)}, tmp_path)

    def dies_half_way(f):
        f.write(b"partial bytes")
        raise KeyboardInterrupt  # the job is killed mid-write

    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(tmp_path / checkpoint.CHECKPOINT, dies_half_way)
    assert checkpoint.load(tmp_path / checkpoint.CHECKPOINT)["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.CHECKPOINT]  # no temp files left


def test_append_line_rewrites_the_file_whole_and_completes_a_torn_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    files.append_line(path, '{"a": 1}')
    path.write_bytes(path.read_bytes() + b'{"torn"')  # a writer of another kind died mid-line
    files.append_line(path, '{"b": 2}')
    assert path.read_text().splitlines() == ['{"a": 1}', '{"torn"', '{"b": 2}']
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no temp files left
    assert list(files.stale_temps(tmp_path)) == []


def test_atomic_writes_keep_the_permissions_a_plain_write_would_give(tmp_path):
    new, old = tmp_path / "new.json", tmp_path / "old.sh"
    umask = os.umask(0o022)
    os.umask(umask)
    files.write_text(new, "{}")  # not mkstemp's 0600: shards and records are shared with a group
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    old.write_text("#!/bin/sh\n")
    old.chmod(0o750)
    files.write_text(old, "#!/bin/sh\ntrue\n")
    assert stat.S_IMODE(old.stat().st_mode) == 0o750 and old.read_text().endswith("true\n")


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.pth.tar"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="bad.pth.tar"):
        checkpoint.load(bad)
    with pytest.raises(checkpoint.CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "missing.pth.tar")


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    checkpoint.save({"rng": checkpoint.rng_state()}, tmp_path)
    expected = torch.rand(3)
    checkpoint.set_rng_state(checkpoint.load(tmp_path / checkpoint.CHECKPOINT)["rng"])
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("length, world", [(21, 2), (7, 4), (3, 8), (100, 3)])
def test_validation_shards_cover_every_image_once(length, world):
    seen = sorted(i for r in range(world) for i in samplers.ShardSampler(length, r, world))
    assert seen == list(range(length))


def test_resumable_sampler_skips_exactly_the_consumed_samples():
    full = samplers.ResumableSampler(range(40), num_replicas=2, rank=1, shuffle=True, seed=3)
    full.set_epoch(2)
    order = list(full)
    part = samplers.ResumableSampler(range(40), num_replicas=2, rank=1, shuffle=True, seed=3)
    part.set_epoch(2)
    part.set_start(8)
    assert list(part) == order[8:]
    assert list(part) == order  # the offset applies to one epoch only


def test_worker_errors_become_one_line():
    wrapped = errors.DataError("Caught DataError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                             "call last):\n  File \"x.py\", line 1\nimagenet.data.DataError: cannot read image "
                             "/d/a.JPEG: broken; replace it")
    assert one_line(wrapped) == "cannot read image /d/a.JPEG: broken; replace it"
    assert one_line(ValueError("plain message")) == "plain message"


@pytest.mark.parametrize("gloo_error", ["[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting "
                                        "30000ms for recv operation to complete",
                                        "Application timeout caused pair closure"])
def test_a_gloo_peer_loss_becomes_the_lost_contact_line(monkeypatch, gloo_error):
    """Both ways gloo reports a peer that stopped answering (which one depends on timing: the second
    came out of DDP's backward on the test cluster with a node's link down)."""
    from hpc_imagenet.imagenet.process import group
    from hpc_imagenet.imagenet.run import distributed

    monkeypatch.setattr(group, "_hosts", ["node1", "node2"])
    line = distributed.lost_peer_message(RuntimeError(gloo_error), 0)
    assert line is not None and line.startswith("rank 0 on node1 lost contact with node2 during a collective")
    assert distributed.lost_peer_message(RuntimeError("CUDA out of memory"), 0) is None


def test_step_breakdown_splits_each_steady_step_into_waiting_and_the_hosts_loop(monkeypatch):
    from hpc_imagenet.imagenet.train import metrics

    clock = iter([0.0, 0.010, 0.050,   # warm-up step: asked, batch in hand, next asked
                  0.052, 0.090,        # steady: 2 ms waiting, then 38 ms in the loop
                  0.100, 0.140,        # steady: 10 ms waiting, 40 ms in the loop
                  0.141, 0.181,        # steady: 1 ms waiting, 40 ms in the loop (ended by the epoch's end)
                  0.300])              # the next epoch asks: no step was in hand
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
    breakdown = metrics.StepBreakdown(torch.device("cpu"))
    breakdown.asking(counted=False)
    breakdown.ready(counted=False)
    for _ in range(3):
        breakdown.asking(counted=_ > 0)  # the step before: the warm-up one first
        breakdown.ready(counted=True)
    breakdown.asking(counted=True)
    assert breakdown.medians() == {"data_wait_ms": 2.0, "host_ms": 40.0, "device_ms": None, "steps": 3}
    breakdown.epoch_end()
    breakdown.asking(counted=True)  # no step is in hand after the epoch's end: nothing is added
    assert breakdown.medians()["steps"] == 3
