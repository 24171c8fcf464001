"""Precision levels O0-O3 on the CPU (bfloat16 and float16), loss scaling and its state."""
import pytest
import torch
from torch import nn

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.model import precision


def _tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))


def _spec(level, dtype="bfloat16", **kw):
    cfg = config.parse(["--dummy", "--opt-level", level, "--amp-dtype", dtype, "--amp-backend", "native",
                        *sum(([f"--{k.replace('_', '-')}", str(v)] for k, v in kw.items()), [])], "amp")
    return precision.resolve(cfg.precision, torch.device("cpu"))


def _train_steps(spec, steps=3):
    model = _tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    prec = precision.build(spec, torch.device("cpu"))
    model, opt = prec.setup(model, opt)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    losses = []
    for _ in range(steps):
        with prec.autocast():
            out = model(prec.cast_input(x))
        loss = nn.functional.cross_entropy(out.float(), y)
        prec.zero_grad(opt)
        prec.backward(loss, opt)
        prec.step(opt)
        losses.append(loss.item())
    return model, opt, prec, losses


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_every_level_trains(level, dtype):
    model, opt, prec, losses = _train_steps(_spec(level, dtype), steps=4)
    assert all(torch.isfinite(torch.tensor(losses)))
    half = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    conv_dtype = model[0].weight.dtype
    assert conv_dtype == (half if level in ("O2", "O3") else torch.float32)
    assert model[1].weight.dtype == (half if level == "O3" else torch.float32)  # BN fp32 except O3


def test_o2_keeps_fp32_master_weights_in_the_optimizer():
    model, opt, prec, _ = _train_steps(_spec("O2"))
    params = [p for g in opt.param_groups for p in g["params"]]
    assert all(p.dtype == torch.float32 for p in params)
    assert prec.masters and torch.equal(prec.masters[0].to(torch.bfloat16), model[0].weight.detach())


def test_bfloat16_needs_no_loss_scaling_and_float16_scales_dynamically():
    assert _spec("O1", "bfloat16").loss_scale == 1.0
    assert _spec("O1", "float16").loss_scale == "dynamic"
    assert _spec("O1", "float16", loss_scale=128).loss_scale == 128.0


def test_dynamic_scaler_skips_overflowing_step_and_halves_scale():
    spec = _spec("O2", "float16")
    model = _tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prec = precision.build(spec, torch.device("cpu"))
    model, opt = prec.setup(model, opt)
    before = [m.detach().clone() for m in prec.masters]
    out = model(prec.cast_input(torch.randn(2, 3, 8, 8)))
    prec.zero_grad(opt)
    prec.backward(out.float().sum(), opt)
    model[0].weight.grad[0, 0, 0, 0] = float("inf")  # injected overflow
    assert not prec.step(opt)
    assert prec.loss_scale == 2.0 ** 15 and prec.skipped_steps == 1
    assert all(torch.equal(b, m) for b, m in zip(before, prec.masters))  # nothing applied
    state = prec.state_dict()
    fresh = precision.build(spec, torch.device("cpu"))
    fresh.setup(_tiny_model(), torch.optim.SGD(_tiny_model().parameters(), lr=0.1))
    fresh.load_state_dict(state)
    assert fresh.loss_scale == 2.0 ** 15 and fresh.skipped_steps == 1


def test_scale_grows_after_clean_steps():
    scaler = precision.LossScaler("dynamic", growth_interval=2)
    scaler.update(torch.zeros(1))
    scaler.update(torch.zeros(1))
    assert scaler.scale == 2.0 ** 17


def _fp16_run(impl, overflow_at=(0, 2), steps=5):
    """SGD with momentum under O1 fp16, gradients poisoned at the given steps; returns weights and scaler."""
    model = _tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4,
                          **({"fused": True} if impl == "fused" else {"foreach": False}))
    prec = precision.build(_spec("O1", "float16"), torch.device("cpu"))
    model, opt = prec.setup(model, opt)
    torch.manual_seed(1)
    taken = []
    for step in range(steps):
        x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
        with prec.autocast():
            loss = nn.functional.cross_entropy(model(x).float(), y)
        prec.zero_grad(opt)
        prec.backward(loss, opt)
        if step in overflow_at:
            model[0].weight.grad[0, 0, 0, 0] = float("nan")
        taken.append(bool(prec.step(opt)))
    return [p.detach().clone() for p in model.parameters()], prec, taken


def test_fused_optimizer_skips_overflowed_steps_on_the_device_like_the_host_check():
    """The fused path (no host sync) skips exactly the steps the host check skips, the very first included
    (whose momentum buffers fused SGD would otherwise leave uninitialised), and ends at the same weights."""
    fused_w, fused, fused_taken = _fp16_run("fused")
    loop_w, loop, loop_taken = _fp16_run("loop")
    assert precision.skips_on_device(torch.optim.SGD([torch.zeros(1)], lr=0.1, fused=True))
    assert fused_taken == loop_taken == [False, True, False, True, True]
    assert fused.skipped_steps == loop.skipped_steps == 2 and fused.loss_scale == loop.loss_scale == 2.0 ** 14
    for a, b in zip(fused_w, loop_w):
        assert torch.isfinite(a).all() and torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_apex_backend_without_apex_names_the_fix(monkeypatch):
    monkeypatch.setattr(precision, "apex_amp", lambda: None)
    cfg = config.parse(["--dummy", "--opt-level", "O1", "--amp-backend", "apex"], "amp")
    with pytest.raises(precision.PrecisionError, match="25.05.*--amp-backend native"):
        precision.resolve(cfg.precision, torch.device("cpu"))


def test_auto_backend_is_native_without_apex_or_gpu():
    cfg = config.parse(["--dummy", "--opt-level", "O2"], "amp")
    assert precision.resolve(cfg.precision, torch.device("cpu")).backend == "native"


def test_auto_backend_is_native_when_accumulating(monkeypatch):
    """Apex unscales once per micro-batch: auto never picks it for --accum-steps (the settings refuse
    an explicit --amp-backend apex there)."""
    monkeypatch.setattr(precision, "apex_amp", lambda: object())
    cfg = config.parse(["--dummy", "--opt-level", "O1", "--amp-dtype", "float16"], "amp")
    gpu = torch.device("cuda", 0)
    assert precision.resolve(cfg.precision, gpu).backend == "apex"
    assert precision.resolve(cfg.precision, gpu, accumulating=True).backend == "native"
    with pytest.raises(config.ConfigError, match="--accum-steps with --amp-backend apex"):
        config.parse(["--dummy", "--accum-steps", "2", "--amp-backend", "apex"], "amp")


def test_bf16_needs_the_cpus_instructions(tmp_path, monkeypatch, caplog):
    with_bf16, without = tmp_path / "with", tmp_path / "without"
    with_bf16.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    without.write_text("flags\t\t: fpu avx2 avx512f\n")
    assert precision.cpu_has_bf16(with_bf16) and not precision.cpu_has_bf16(without)
    assert precision.cpu_has_bf16(tmp_path / "absent")  # unknown: the user's choice stands
    arm = tmp_path / "arm"
    arm.write_text("Features\t: fp asimd bf16 sve\n")
    assert precision.cpu_has_bf16(arm)
    monkeypatch.setenv("HPC_IMAGENET_CPUINFO", str(without))
    monkeypatch.setenv("HPC_IMAGENET_CPU_BF16", "auto")
    cfg = config.parse(["--dummy", "--opt-level", "O2", "--amp-dtype", "bfloat16"])
    with caplog.at_level("WARNING"):
        spec = precision.resolve(cfg.precision, torch.device("cpu"))
    assert (spec.level, spec.dtype, spec.label, spec.requested) == ("O0", None, "fp32", "O2-bf16")
    assert [r.getMessage() for r in caplog.records if "no bfloat16 instructions" in r.getMessage()] and \
        "instead of O2" in caplog.text
    monkeypatch.setenv("HPC_IMAGENET_CPUINFO", str(with_bf16))
    assert precision.resolve(cfg.precision, torch.device("cpu")).label == "O2-bf16"


def test_emulated_bf16_is_run_as_asked_on_a_cpu_without_the_instructions(tmp_path, monkeypatch, caplog):
    """HPC_IMAGENET_CPU_BF16=emulate: the user's (and the suite's) way to run bf16 where the CPU lacks it."""
    without = tmp_path / "without"
    without.write_text("flags\t\t: fpu avx2 avx512f\n")
    monkeypatch.setenv("HPC_IMAGENET_CPUINFO", str(without))
    monkeypatch.setenv("HPC_IMAGENET_CPU_BF16", "emulate")
    cfg = config.parse(["--dummy", "--opt-level", "O2", "--amp-dtype", "bfloat16"])
    with caplog.at_level("WARNING"):
        spec = precision.resolve(cfg.precision, torch.device("cpu"))
    assert (spec.level, spec.dtype, spec.label, spec.requested) == ("O2", torch.bfloat16, "O2-bf16", "O2-bf16")
    assert "emulated bf16" in caplog.text
    monkeypatch.setenv("HPC_IMAGENET_CPU_BF16", "always")
    with pytest.raises(precision.PrecisionError, match="HPC_IMAGENET_CPU_BF16='always' is not one of auto, emulate"):
        precision.resolve(cfg.precision, torch.device("cpu"))
