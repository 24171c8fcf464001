"""LR schedules: the multiplier at warm-up start and end, the peak and the last step in closed form,
and the same value after a resume in the middle of an epoch (a fresh LambdaLR set to the count)."""
import math

import pytest
import torch

from hpc_imagenet.imagenet.train.schedules import Schedule, lr_factor

SPE = 10  # steps per epoch


def test_poly_matches_mlperf_closed_form():
    """MLPerf: lr * step / W in warm-up (0 at step 0), then (1-e)(1 - t/D)^2 + e, D = total - W + 1."""
    s = Schedule("poly", epochs=6, warmup_epochs=2, warmup_start=0.0, power=2.0, end_factor=1e-5)
    total, warm = 6 * SPE, 2 * SPE
    decay_steps = total - warm + 1
    assert lr_factor(0, SPE, s) == 0.0
    assert lr_factor(warm - 1, SPE, s) == pytest.approx((warm - 1) / warm)
    assert lr_factor(warm, SPE, s) == pytest.approx(1.0)  # the peak
    last = total - 1
    want = (1 - 1e-5) * (1 - (last - warm) / decay_steps) ** 2 + 1e-5
    assert lr_factor(last, SPE, s) == pytest.approx(want, rel=1e-12)


def test_ramp_matches_ffcv_per_step_interpolation():
    """FFCV: per epoch interp(e, [0, 2, E], [1e-4, 1, 0]); per step the line to the next epoch's value."""
    s = Schedule("ramp", epochs=5, peak_epoch=2)
    assert lr_factor(0, SPE, s) == pytest.approx(1e-4)
    assert lr_factor(2 * SPE, SPE, s) == pytest.approx(1.0)  # the peak
    at_one = 1e-4 + 0.5 * (1 - 1e-4)  # epoch 1, half-way up
    assert lr_factor(SPE + 5, SPE, s) == pytest.approx(at_one + 0.5 * (1 - at_one))
    last = 5 * SPE - 1
    assert lr_factor(last, SPE, s) == pytest.approx((1 / 3) * (1 / SPE))  # from 1/3 at epoch 4 towards 0


@pytest.mark.parametrize("start", [None, 0.01], ids=["plus-one-rule", "start-factor"])
def test_warmup_start_and_end(start):
    s = Schedule("cosine", epochs=10, warmup_epochs=3, warmup_start=start)
    warm = 3 * SPE
    first = lr_factor(0, SPE, s)
    assert first == pytest.approx(1 / warm if start is None else start)
    end = 1.0 if start is None else start + (1 - start) * (warm - 1) / warm
    assert lr_factor(warm - 1, SPE, s) == pytest.approx(end)
    assert lr_factor(warm, SPE, s) == pytest.approx(1.0)
    last = 10 * SPE - 1
    assert lr_factor(last, SPE, s) == pytest.approx(0.5 * (1 + math.cos(math.pi * (last - warm) / (7 * SPE))))


def test_step_schedule_as_pytorch_examples():
    s = Schedule("step", epochs=90, milestones=(30, 60, 80))
    assert [lr_factor(e * SPE, SPE, s) for e in (0, 29, 30, 60, 89)] == pytest.approx([1, 1, 0.1, 0.01, 0.001])


@pytest.mark.parametrize("kind", ["step", "cosine", "poly", "ramp"])
def test_mid_epoch_resume_lands_on_the_same_lr(kind):
    s = Schedule(kind, epochs=4, warmup_epochs=0 if kind == "ramp" else 1, milestones=(2, 3), peak_epoch=1,
                 warmup_start=0.0 if kind == "poly" else None)

    def scheduler():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda it: lr_factor(it, SPE, s))

    opt, sched = scheduler()
    lrs = []
    for _ in range(4 * SPE):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    resume_at = 2 * SPE + 3  # mid-epoch
    opt2, sched2 = scheduler()
    opt2.step()
    sched2.load_state_dict({**sched.state_dict(), "last_epoch": resume_at - 1, "_step_count": resume_at})
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(lrs[resume_at])
    assert lrs[resume_at] == pytest.approx(2.0 * lr_factor(resume_at, SPE, s))
