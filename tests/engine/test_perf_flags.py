"""Training-step speed flags take effect, and the hot loop never waits for the device.

In process (fast): --optimizer-impl builds the asked-for SGD kernels and keeps them across a
checkpoint load; the DDP options reach DistributedDataParallel on a one-process gloo group, where
the bf16 hook visibly rounds the gradients; each flag and data backend trains a couple of steps.
(Two gloo processes under torchrun with the compression hook: test_engine_variants.py's
optimisation-flags test.) The sync test patches every host-sync entry point for the steps between
print boundaries.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator, List

import pytest
import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.run import build, distributed
from hpc_imagenet.imagenet.train import metrics, optim, step, trainer
from hpc_imagenet.imagenet.process import group
from hpc_imagenet.imagenet.process.group import DistInfo
from tests.helpers import TINY, free_port, read_run

CPU = torch.device("cpu")
SHORT = ["--epochs", "1", "--steps-per-epoch", "2", "--val-steps", "1"]


def _cfg(*argv: str, variant: str = "ddp") -> config.Settings:
    return config.parse(["--dummy", *argv], variant)


def _tiny_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 10))


@contextlib.contextmanager
def _signals_restored() -> Iterator[None]:
    """build.run installs preemption handlers; give pytest its own back afterwards."""
    saved = {name: signal.getsignal(getattr(signal, name)) for name in ("SIGUSR1", "SIGUSR2", "SIGTERM")}
    try:
        yield
    finally:
        for name, handler in saved.items():
            signal.signal(getattr(signal, name), handler)


def _train_in_process(argv: List[str], variant: str = "nd") -> int:
    cfg = config.parse(argv, variant)
    with _signals_restored():
        return build.run(build.build(cfg, DistInfo(0, 0, 1, 1, 0, "single", CPU)))


# ---------------------------------------------------------------- optimizer kernels

@pytest.mark.parametrize("impl,fused,foreach", [("fused", True, None), ("foreach", None, True),
                                                ("default", None, None), ("auto", True, None)])
def test_optimizer_impl(impl, fused, foreach):
    model = _tiny_model()
    opt = optim.build_optimizer(model, _cfg("--optimizer-impl", impl).optim, lr=0.1)
    assert all(g.get("fused") == fused and g.get("foreach") == foreach for g in opt.param_groups)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    for g in saved["param_groups"]:  # a checkpoint written with other kernels
        g["fused"], g["foreach"] = None, None
    opt.load_state_dict(saved)
    assert all(g.get("fused") == fused and g.get("foreach") == foreach for g in opt.param_groups)


def test_auto_avoids_cpu_fused_on_channels_last_weights():
    model = _tiny_model().to(memory_format=torch.channels_last)
    opt = optim.build_optimizer(model, _cfg().optim, lr=0.1)
    assert not opt.param_groups[0]["fused"] and not opt.param_groups[0]["foreach"]


def test_fused_where_unsupported(monkeypatch):
    from torch.optim import optimizer as torch_optimizer

    monkeypatch.setattr(torch_optimizer, "_get_fused_kernels_supported_devices", lambda: ["cuda"], raising=False)
    with pytest.raises(config.ConfigError, match="--optimizer-impl foreach"):
        optim.build_optimizer(_tiny_model(), _cfg("--optimizer-impl", "fused").optim, lr=0.1)
    opt = optim.build_optimizer(_tiny_model(), _cfg().optim, lr=0.1)  # auto falls back to torch's choice
    assert not opt.param_groups[0]["foreach"] and not opt.param_groups[0]["fused"]


# ---------------------------------------------------------------- each flag trains

@pytest.mark.parametrize("flags", [["--channels-last"], ["--optimizer-impl", "fused"],
                                   ["--optimizer-impl", "foreach"], ["--optimizer-impl", "default"]])
def test_flag_trains_a_few_steps(tmp_path, flags):
    argv = ["--dummy", "--dummy-size", "64", "--num-classes", "10", *TINY, *SHORT, "--log-dir", str(tmp_path),
            *flags]
    assert _train_in_process(argv) == 0
    assert read_run(tmp_path)["status"] == "finished"


@pytest.mark.parametrize("backend", ["fast", "baseline", "device"])
def test_data_backend_trains_a_few_steps(tmp_path, jpeg_data, backend):
    """uint8 (fast) and float (baseline) batches both go through DeviceNormalizer."""
    argv = [*TINY, *SHORT, "--data-backend", backend, "--log-dir", str(tmp_path), str(jpeg_data)]
    assert _train_in_process(argv) == 0
    assert read_run(tmp_path)["config"]["data"]["data_backend"] == backend


def test_channels_last_reaches_model_and_batches():
    from hpc_imagenet.imagenet.model import network
    from hpc_imagenet.imagenet.data import normalize

    model = network.prepare(network.build("resnet18", 10, False), CPU, True, False)
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    batch = normalize.DeviceNormalizer(CPU, channels_last=True)(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
    assert batch.dtype == torch.float32 and batch.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------- DDP options

@contextlib.contextmanager
def _one_process_group() -> Iterator[DistInfo]:
    info = DistInfo(0, 0, 1, 1, 0, "single", CPU, "gloo", f"tcp://127.0.0.1:{free_port()}")
    distributed.init(info, 60)
    try:
        yield info
    finally:
        group.cleanup()


def _grads_after_one_step(ddp: torch.nn.Module) -> List[torch.Tensor]:
    torch.manual_seed(0)
    ddp(torch.randn(4, 3, 8, 8)).square().sum().backward()
    return [p.grad for p in ddp.parameters()]


def test_ddp_options_reach_ddp():
    with _one_process_group() as info:
        ddp = build._ddp(_tiny_model(), _cfg("--ddp-bucket-cap-mb", "1", "--ddp-static-graph").dist, info)
        assert ddp.bucket_bytes_cap == 1024 * 1024 and ddp.static_graph and ddp.gradient_as_bucket_view
        plain = build._ddp(_tiny_model(), _cfg().dist, info)
        assert plain.bucket_bytes_cap == 25 * 1024 * 1024 and not plain.static_graph


def test_bf16_comm_hook_rounds_the_all_reduced_gradients():
    def representable(g: torch.Tensor) -> bool:
        return torch.equal(g, g.bfloat16().float())

    with _one_process_group() as info:
        torch.manual_seed(1)
        hooked = build._ddp(_tiny_model(), _cfg("--ddp-comm-hook", "bf16").dist, info)
        torch.manual_seed(1)
        plain = build._ddp(_tiny_model(), _cfg().dist, info)
        assert all(representable(g) for g in _grads_after_one_step(hooked))
        assert not all(representable(g) for g in _grads_after_one_step(plain))


@pytest.mark.parametrize("flags,mode", [(("--compile",), None),
                                        (("--compile-mode", "reduce-overhead"), "reduce-overhead")])
def test_compile_mode_reaches_torch_compile(tmp_path, monkeypatch, flags, mode):
    """The training model goes through torch.compile with the mode asked for (compiling itself is
    exercised on a GPU in tests/engine/test_gpu.py; here torch.compile is replaced by a recorder)."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: calls.append(mode) or model)
    argv = ["--dummy", "--dummy-size", "64", "--num-classes", "10", *TINY, *SHORT, "--log-dir", str(tmp_path), *flags]
    assert _train_in_process(argv) == 0
    assert calls == [mode]


# ---------------------------------------------------------------- no host sync between print boundaries

SYNCING_TENSOR_METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__",
                          "nonzero")


class SyncTrap:
    """Records host-sync calls made while ``hot``: reading a tensor's value on the host, waiting for
    the device, or materialising Python values on a device (a blocking copy from pageable memory)."""

    def __init__(self, monkeypatch):
        self.hot = False
        self.calls: List[str] = []
        for name in SYNCING_TENSOR_METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._wrap(getattr(torch.Tensor, name), f"Tensor.{name}"))
        monkeypatch.setattr(torch.cuda, "synchronize", self._wrap(torch.cuda.synchronize, "cuda.synchronize"))
        monkeypatch.setattr(metrics, "synchronize", self._wrap(metrics.synchronize, "metrics.synchronize"))
        monkeypatch.setattr(trainer, "synchronize", self._wrap(trainer.synchronize, "trainer.synchronize"))
        monkeypatch.setattr(torch, "tensor", self._wrap(torch.tensor, "torch.tensor(device=...)", on_device=True))

    def _wrap(self, fn, label: str, on_device: bool = False):
        def wrapper(*args, **kwargs):
            if self.hot and (not on_device or kwargs.get("device") is not None):
                self.calls.append(label)
            return fn(*args, **kwargs)
        return wrapper

    def around(self, monkeypatch, cls, name: str, hot: bool) -> None:
        """Make calls inside cls.name hot (the step) or cold (a print boundary)."""
        original = getattr(cls, name)
        trap = self

        def wrapper(*args, **kwargs):
            previous, trap.hot = trap.hot, hot
            try:
                return original(*args, **kwargs)
            finally:
                trap.hot = previous
        monkeypatch.setattr(cls, name, wrapper)


def _steps_between_prints(tmp_path, monkeypatch, *flags: str, variant: str = "nd") -> List[str]:
    """Train 6 steps printing only at the end; return the host syncs made inside the steps."""
    trap = SyncTrap(monkeypatch)
    trap.around(monkeypatch, step.Stepper, "step", hot=True)
    trap.around(monkeypatch, metrics.EpochMeter, "update", hot=True)
    # 16 px: a sync does not depend on the size, and fp16 arithmetic on a CPU is slow (4x less of it)
    argv = ["--dummy", "--dummy-size", "48", "--num-classes", "10", *TINY, "--image-size", "16", "--epochs", "1",
            "--val-steps", "1", "-p", "100", "--log-dir", str(tmp_path), *flags]
    assert _train_in_process(argv, variant) == 0
    return trap.calls


def test_the_trap_sees_host_syncs(monkeypatch):
    trap, t = SyncTrap(monkeypatch), torch.ones(1)
    t.item()  # cold: not recorded
    trap.hot = True
    t.item(), bool(t), t.tolist(), float(t), torch.tensor(1.0), torch.tensor(1.0, device="cpu")
    trap.hot = False
    assert trap.calls == ["Tensor.item", "Tensor.__bool__", "Tensor.tolist", "Tensor.__float__",
                          "torch.tensor(device=...)"]


@pytest.mark.parametrize("flags", [(), ("--opt-level", "O1", "--amp-dtype", "float16"),
                                   ("--opt-level", "O2", "--amp-dtype", "float16")],
                         ids=["fp32", "O1-fp16", "O2-fp16"])
def test_no_host_sync_in_the_steps(tmp_path, monkeypatch, flags):
    """No value read back, no device wait, no Python value copied to the device between prints; with
    fp16 the fused optimizer skips overflowed steps from the device flag, so loss scaling adds none."""
    assert _steps_between_prints(tmp_path, monkeypatch, "--amp-backend", "native", *flags, variant="amp") == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch's sync debug mode)")
@pytest.mark.parametrize("flags", [(), ("--opt-level", "O1", "--amp-dtype", "float16")], ids=["fp32", "O1-fp16"])
def test_cuda_sync_debug_mode_in_the_step(tmp_path, monkeypatch, flags):
    """On a GPU, torch itself reports every synchronising CUDA call made inside the steps."""
    original = step.Stepper.step

    def strict_step(self, *args):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return original(self, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    monkeypatch.setattr(step.Stepper, "step", strict_step)
    cfg = config.parse(["--dummy", "--dummy-size", "96", "--num-classes", "10", "-a", "resnet18", "--image-size",
                        "32", "-b", "8", "--workers", "0", "--epochs", "1", "-p", "100", "--val-steps", "1",
                        "--log-dir", str(tmp_path), "--amp-backend", "native", *flags], "amp")
    with _signals_restored():
        assert build.run(build.build(cfg, DistInfo(0, 0, 1, 1, 0, "single", torch.device("cuda", 0)))) == 0
