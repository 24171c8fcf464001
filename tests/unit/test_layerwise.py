"""LARS and LAMB: one or two steps on small tensors against the reference formulas, written out
here in float64 (MLPerf's lars_optimizer.py; You et al. 2019's LAMB), at constant and changing LR,
with a zero-norm weight, a zero gradient and a parameter left out of the adaptation (no decay)."""
import math

import pytest
import torch

from hpc_imagenet.imagenet.train.layerwise import KERAS_EPSILON, Lamb, Lars

MOMENTUM, DECAY, COEFF = 0.9, 2e-4, 0.001


def _params():
    """(weight, grad) pairs: an ordinary weight, a zero weight, a weight whose gradient is zero."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 3, generator=g, dtype=torch.float64)
    return [(weight, torch.randn(4, 3, generator=g, dtype=torch.float64)),
            (torch.zeros(5, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)),
            (torch.randn(2, 2, generator=g, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))]


def _reference_lars(weights, grads_per_step, lrs, adapt):
    """MLPerf's update: trust from the raw gradient, decay added after, LR inside the momentum."""
    weights = [w.clone() for w in weights]
    buffers = [torch.zeros_like(w) for w in weights]
    for grads, lr in zip(grads_per_step, lrs):
        for i, (w, g) in enumerate(zip(weights, grads)):
            if adapt:
                wn, gn = float(w.norm()), float(g.norm())
                trust = COEFF * wn / (gn + DECAY * wn + KERAS_EPSILON) if wn > 0 and gn > 0 else 1.0
                scaled = lr * trust * (g + DECAY * w)
            else:
                scaled = lr * g
            buffers[i] = MOMENTUM * buffers[i] + scaled
            weights[i] = w - buffers[i]
    return weights


def _lr_outside(weights, grads_per_step, lrs):
    """timm's order: the momentum holds trust * g, the LR multiplies it afterwards."""
    weights = [w.clone() for w in weights]
    buffers = [torch.zeros_like(w) for w in weights]
    for grads, lr in zip(grads_per_step, lrs):
        for i, (w, g) in enumerate(zip(weights, grads)):
            wn, gn = float(w.norm()), float(g.norm())
            trust = COEFF * wn / (gn + DECAY * wn + KERAS_EPSILON) if wn > 0 and gn > 0 else 1.0
            buffers[i] = MOMENTUM * buffers[i] + trust * (g + DECAY * w)
            weights[i] = w - lr * buffers[i]
    return weights


def _run(optimizer_cls, weights, grads_per_step, lrs, adapt=True, **kw):
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    opt = optimizer_cls([{"params": params, "adapt": adapt}], lr=lrs[0], **kw)
    for grads, lr in zip(grads_per_step, lrs):
        for p, g in zip(params, grads):
            p.grad = g.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    return [p.detach() for p in params]


def _two_steps():
    first = _params()
    weights = [w for w, _ in first]
    second = [g.flip(0) * 0.5 for _, g in first]
    return weights, [[g for _, g in first], second]


@pytest.mark.parametrize("lrs", [(10.0, 10.0), (2.0, 7.0)], ids=["constant-lr", "changing-lr"])
@pytest.mark.parametrize("adapt", [True, False], ids=["adapted", "no-decay-group"])
def test_lars_matches_mlperf_reference(lrs, adapt):
    weights, grads = _two_steps()
    got = _run(Lars, weights, grads, lrs, adapt=adapt, momentum=MOMENTUM, weight_decay=DECAY, coefficient=COEFF)
    want = _reference_lars(weights, grads, lrs, adapt)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14)


def test_lars_zero_norms_use_trust_one():
    """A zero weight and a zero gradient: trust ratio 1, the plain (decayed) momentum step."""
    (_, g_zero_w), (w_zero_g, _) = _params()[1], _params()[2]
    got = _run(Lars, [torch.zeros(5, dtype=torch.float64), w_zero_g],
               [[g_zero_w, torch.zeros_like(w_zero_g)]], [3.0], weight_decay=DECAY, coefficient=COEFF)
    torch.testing.assert_close(got[0], -3.0 * g_zero_w)
    torch.testing.assert_close(got[1], w_zero_g - 3.0 * DECAY * w_zero_g)


def test_lr_inside_momentum_differs_from_timm_order_only_when_lr_changes():
    weights, grads = _two_steps()
    kw = {"momentum": MOMENTUM, "weight_decay": DECAY, "coefficient": COEFF}
    constant = _run(Lars, weights, grads, (5.0, 5.0), **kw)
    changing = _run(Lars, weights, grads, (1.0, 5.0), **kw)
    torch.testing.assert_close(constant[0], _lr_outside(weights, grads, (5.0, 5.0))[0])
    assert not torch.allclose(changing[0], _lr_outside(weights, grads, (1.0, 5.0))[0])


def _reference_lamb(weights, grads_per_step, lrs, adapt, betas=(0.9, 0.999), eps=1e-6, decay=0.01):
    weights = [w.clone() for w in weights]
    m = [torch.zeros_like(w) for w in weights]
    v = [torch.zeros_like(w) for w in weights]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        for i, (w, g) in enumerate(zip(weights, grads)):
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            update = (m[i] / (1 - betas[0] ** t)) / ((v[i] / (1 - betas[1] ** t)).sqrt() + eps)
            if adapt:
                update = update + decay * w
                wn, un = float(w.norm()), float(update.norm())
                update = update * (wn / un if wn > 0 and un > 0 else 1.0)
            weights[i] = w - lr * update
    return weights


@pytest.mark.parametrize("lrs", [(0.01, 0.01), (0.002, 0.02)], ids=["constant-lr", "changing-lr"])
@pytest.mark.parametrize("adapt", [True, False], ids=["adapted", "no-decay-group"])
def test_lamb_matches_reference(lrs, adapt):
    weights, grads = _two_steps()
    got = _run(Lamb, weights, grads, lrs, adapt=adapt)
    for g, w in zip(got, _reference_lamb(weights, grads, lrs, adapt)):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14)


def test_lars_first_trust_ratio_in_closed_form():
    """One weight, one step: w - lr * coeff * |w| / (|g| + wd |w| + eps) * (g + wd w)."""
    w, g = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64)
    got = _run(Lars, [w], [[g]], [1.0], weight_decay=DECAY, coefficient=COEFF)[0]
    trust = COEFF * 5.0 / (2.0 + DECAY * 5.0 + KERAS_EPSILON)
    assert math.isclose(float(got[1]), 4.0 - trust * (2.0 + DECAY * 4.0), rel_tol=1e-12)


def test_lars_list_kernels_keep_each_dtype_and_skip_parameters_without_gradients():
    """One group, updated by torch's list kernels: an fp16 weight stays fp16 and lands where the
    float64 reference does (to fp16 precision); a parameter whose gradient is None is untouched."""
    weights, grads = _two_steps()
    half = torch.nn.Parameter(weights[0].clone().half())
    idle = torch.nn.Parameter(torch.ones(3))
    opt = Lars([half, idle], lr=10.0, momentum=MOMENTUM, weight_decay=DECAY, coefficient=COEFF)
    for step_grads in grads:
        half.grad = step_grads[0].clone().half()
        opt.step()
    want = _reference_lars([weights[0].half().double()], [[g[0].half().double()] for g in grads], (10.0, 10.0),
                           adapt=True)[0]
    assert half.dtype == torch.float16 and idle.grad is None and torch.equal(idle.detach(), torch.ones(3))
    torch.testing.assert_close(half.detach().double(), want, rtol=2e-3, atol=1e-3)
