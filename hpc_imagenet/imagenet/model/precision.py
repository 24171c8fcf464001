"""One mixed-precision interface with two backends: native torch.amp and NVIDIA Apex AMP.

Opt levels mean the same in both (Apex's definitions):

- O0: fp32 everywhere.
- O1: fp32 weights, ops autocast to the half type (``torch.autocast``).
- O2: the model in the half type with BatchNorm kept fp32, fp32 master weights in the optimizer;
  gradients are copied to the masters, unscaled, stepped, and the masters copied back.
- O3: everything in the half type (BatchNorm too unless ``--keep-batchnorm-fp32 True``).

float16 needs loss scaling (dynamic by default: overflowing steps are skipped and the scale is
halved; it doubles after 2000 clean steps); bfloat16 has fp32's range and needs none. The training
loop calls the same methods whatever the backend or level.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

import torch
from torch import nn

log = logging.getLogger(__name__)

APEX_HINT = ("NVIDIA Apex with apex.amp is not installed (apex.amp exists only in Apex releases up to 25.05); "
             "install Apex 25.05 or use --amp-backend native")


# x86's AVX-512 BF16 and AMX-BF16, Arm's BF16 (/proc/cpuinfo's "flags" and "Features" lines)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpuinfo() -> Path:
    """Where the CPU's instruction-set flags are read: /proc/cpuinfo, or the file HPC_IMAGENET_CPUINFO names, to
    see what the engine does on a CPU it is not running on (the tests simulate one without bf16 instructions)."""
    return Path(os.environ.get("HPC_IMAGENET_CPUINFO", "/proc/cpuinfo"))


# HPC_IMAGENET_CPU_BF16: what a bf16 setting does on a CPU without bf16 instructions. "auto" (the default) runs
# fp32 and says so; "emulate" runs bf16 as asked, in torch's emulation (slower than fp32, numerically the same
# machinery): to test or reproduce mixed-precision runs on such a CPU, as the test suite does.
CPU_BF16_ENV = "HPC_IMAGENET_CPU_BF16"
CPU_BF16_MODES = ("auto", "emulate")


def cpu_bf16_mode() -> str:
    """The HPC_IMAGENET_CPU_BF16 setting: "auto" (unset) or "emulate"."""
    value = os.environ.get(CPU_BF16_ENV, "").strip().lower() or "auto"
    if value not in CPU_BF16_MODES:
        raise PrecisionError(f"{CPU_BF16_ENV}={value!r} is not one of {', '.join(CPU_BF16_MODES)}: unset it to run "
                             "fp32 where the CPU has no bf16 instructions, or set it to emulate to run bf16 anyway")
    return value


def cpu_has_bf16(path: Optional[Path] = None) -> bool:
    """Whether this CPU has bfloat16 arithmetic instructions. Without them torch emulates bf16 by converting
    to and from fp32 around fp32 arithmetic: numerically fine but slower than plain fp32. Unknown (no
    readable flags, not Linux) counts as having them: the user's choice stands."""
    try:
        lines = (path or cpuinfo()).read_text().splitlines()
    except OSError:
        return True
    flags = {word for line in lines if line.split(":")[0].strip() in ("flags", "Features")
             for word in line.split(":", 1)[-1].split()}
    return not flags or bool(flags & BF16_FLAGS)


class PrecisionError(RuntimeError):
    """An impossible precision setting; the message says what to change."""


@dataclass(frozen=True)
class PrecisionSpec:
    level: str                      # O0..O3
    dtype: Optional[torch.dtype]    # half type, None at O0
    loss_scale: Union[str, float]   # "dynamic", a fixed float, or 1.0 when no scaling is needed
    keep_bn_fp32: bool
    backend: str                    # "native" or "apex"
    requested: str = ""             # the label the settings asked for, where the device changed it

    @property
    def label(self) -> str:
        return precision_label(self.level, self.dtype)


def precision_label(level: str, dtype: Optional[torch.dtype]) -> str:
    """fp32, or LEVEL-fp16 / LEVEL-bf16: how logs, run.json and the reports name a precision."""
    if level == "O0":
        return "fp32"
    return f"{level}-{'fp16' if dtype == torch.float16 else 'bf16'}"


def apex_amp():
    """The apex.amp module, or None when Apex (<= 25.05) is not importable."""
    try:
        from apex import amp  # type: ignore
        return amp
    except Exception:  # ImportError, or a broken Apex build raising anything on import
        return None


def resolve(cfg, device: torch.device, accumulating: bool = False) -> PrecisionSpec:
    """Turn the precision section of the settings into a spec; fails on combinations that only the
    device can rule out (the others were refused by the settings' validation). ACCUMULATING
    (--accum-steps > 1): auto picks native, as Apex unscales once per micro-batch."""
    level = cfg.precision_level
    dtype = None
    if level != "O0":
        name = cfg.amp_dtype or ("float16" if device.type == "cuda" else "bfloat16")
        dtype = torch.float16 if name == "float16" else torch.bfloat16
    requested = precision_label(level, dtype)
    if device.type == "cpu" and dtype == torch.bfloat16 and not cpu_has_bf16():
        level, dtype = _without_bf16_instructions(level)
    backend = cfg.amp_backend
    if backend == "auto":
        apex = level != "O0" and device.type == "cuda" and not accumulating and apex_amp() is not None
        backend = "apex" if apex else "native"
    if backend == "apex":
        if apex_amp() is None:
            raise PrecisionError(APEX_HINT)
        if device.type != "cuda":
            raise PrecisionError("Apex AMP needs a CUDA GPU; on CPU use --amp-backend native")
    keep_bn = {"True": True, "False": False}.get(cfg.keep_batchnorm_fp32, level != "O3")
    if dtype == torch.float16:
        scale: Union[str, float] = "dynamic" if cfg.loss_scale == "dynamic" else float(cfg.loss_scale)
    else:
        scale = 1.0  # fp32 and bf16 share fp32's exponent range: nothing underflows
    return PrecisionSpec(level, dtype, scale, keep_bn, backend, requested)


def _without_bf16_instructions(level: str) -> Tuple[str, Optional[torch.dtype]]:
    """The level and dtype to run where the CPU emulates bf16: fp32, unless HPC_IMAGENET_CPU_BF16=emulate."""
    if cpu_bf16_mode() == "emulate":
        log.warning("this CPU has no bfloat16 instructions (no avx512_bf16, amx_bf16 or bf16 in %s): running %s in "
                    "emulated bf16, as %s=emulate asks (slower than fp32)", cpuinfo(), level, CPU_BF16_ENV)
        return level, torch.bfloat16
    log.warning("this CPU has no bfloat16 instructions (no avx512_bf16, amx_bf16 or bf16 in %s), where bf16 "
                "is emulated and slower than fp32: running fp32 (--opt-level O0) instead of %s "
                "(%s=emulate runs bf16 anyway)", cpuinfo(), level, CPU_BF16_ENV)
    return "O0", None


class LossScaler:
    """Static or dynamic loss scale; steps whose gradients overflowed are skipped.

    The scale and the step counters live in device tensors and are updated there
    (``torch._amp_update_scale_``), so scaling itself never waits for the GPU; reading them
    (``scale``, ``skipped_steps``) is a host sync, done only at print boundaries and checkpoints.
    """

    def __init__(self, scale: Union[str, float], growth_interval: int = 2000,
                 device: Optional[torch.device] = None):
        self.dynamic = scale == "dynamic"
        first = 2.0 ** 16 if self.dynamic else float(scale)
        self.active = self.dynamic or first != 1.0
        self.growth_interval = growth_interval
        device = device or torch.device("cpu")
        self._scale = torch.full((1,), first, dtype=torch.float32, device=device)
        self._clean = torch.zeros(1, dtype=torch.int32, device=device)  # clean steps since the last change
        self._skipped = torch.zeros(1, dtype=torch.float32, device=device)

    @property
    def scale(self) -> float:
        return float(self._scale.item())

    @property
    def skipped_steps(self) -> int:
        return int(self._skipped.item())

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale[0]

    def unscale(self, grads: List[torch.Tensor]) -> torch.Tensor:
        """Divide grads by the scale in place; returns found_inf (1.0 where any is inf/NaN), on the device."""
        found_inf = torch.zeros(1, dtype=torch.float32, device=self._scale.device)
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, self._scale.reciprocal())
        return found_inf

    def update(self, found_inf: torch.Tensor) -> None:
        """Count a skipped step and halve the scale on overflow; double it after growth_interval clean steps."""
        self._skipped += found_inf
        if self.dynamic:
            torch._amp_update_scale_(self._scale, self._clean, found_inf, 2.0, 0.5, self.growth_interval)

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean_steps": int(self._clean.item()), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        self._scale.fill_(float(state["scale"]))
        self._clean.fill_(int(state["clean_steps"]) % self.growth_interval)
        self._skipped.fill_(int(state.get("skipped_steps", 0)))


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether OPTIMIZER can skip an overflowed step itself, from a device flag (no host sync).

    torch's fused SGD reads ``found_inf`` in its kernel. It creates missing momentum buffers
    uninitialised and fills them only in a step it takes, so a first step skipped that way would
    leave garbage: :func:`zero_momentum_buffers` fills them first (the same first update when
    dampening is 0, hence the condition).
    """
    return (isinstance(optimizer, torch.optim.SGD) and getattr(optimizer, "_step_supports_amp_scaling", False)
            and all(g.get("dampening", 0) == 0 for g in optimizer.param_groups))


def zero_momentum_buffers(optimizer: torch.optim.Optimizer) -> None:
    for group in optimizer.param_groups:
        if group.get("momentum", 0) == 0:
            continue
        for p in group["params"]:
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def _is_bn(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm)


def cast_model(model: nn.Module, dtype: torch.dtype, keep_bn_fp32: bool) -> nn.Module:
    """Cast parameters and float buffers to DTYPE, leaving BatchNorm layers fp32 if asked."""
    for module in model.modules():
        if keep_bn_fp32 and _is_bn(module):
            continue
        for param in module.parameters(recurse=False):
            param.data = param.data.to(dtype)
        for name, buf in module.named_buffers(recurse=False):
            if buf is not None and buf.is_floating_point():
                module._buffers[name] = buf.to(dtype)
    return model


class NativePrecision:
    """torch.autocast + our loss scaler + fp32 master weights for O2."""

    def __init__(self, spec: PrecisionSpec, device: torch.device, clip_grad_norm: Optional[float] = None):
        self.spec = spec
        self.device = device
        self.clip_grad_norm = clip_grad_norm
        self.scaler = LossScaler(spec.loss_scale, device=device)
        self.model_params: List[nn.Parameter] = []
        self.masters: List[nn.Parameter] = []

    # -- set-up
    def setup(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Tuple[nn.Module, torch.optim.Optimizer]:
        level, dtype = self.spec.level, self.spec.dtype
        if level in ("O2", "O3"):
            cast_model(model, dtype, self.spec.keep_bn_fp32)
        if level == "O2":
            self._use_master_weights(optimizer)
        return model, optimizer

    def _use_master_weights(self, optimizer: torch.optim.Optimizer) -> None:
        """Point the optimizer at fp32 copies of every half-precision parameter."""
        for group in optimizer.param_groups:
            new_params = []
            for p in group["params"]:
                if p.dtype == torch.float32:
                    new_params.append(p)  # BatchNorm kept fp32: it is its own master
                    continue
                master = nn.Parameter(p.detach().float().clone())
                self.model_params.append(p)
                self.masters.append(master)
                new_params.append(master)
            group["params"] = new_params

    # -- the step
    def autocast(self):
        if self.spec.level == "O1":
            return torch.autocast(self.device.type, dtype=self.spec.dtype)
        return contextlib.nullcontext()

    def cast_input(self, images: torch.Tensor) -> torch.Tensor:
        return images.to(self.spec.dtype) if self.spec.level in ("O2", "O3") else images

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        (self.scaler.scale_loss(loss) if self.scaler.active else loss).backward()

    def _optimizer_grads(self, optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
        for model_p, master in zip(self.model_params, self.masters):
            master.grad = None if model_p.grad is None else model_p.grad.detach().float()
        return [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]

    def step(self, optimizer: torch.optim.Optimizer) -> Union[bool, torch.Tensor]:
        """Unscale, skip on overflow, step. Returns whether the step was taken: a bool, or with a
        fused optimizer a device tensor (reading it is a host sync, so the loop does not)."""
        grads = self._optimizer_grads(optimizer)
        if not self.scaler.active:
            clip_gradients(optimizer, self.clip_grad_norm)
            optimizer.step()
            self._copy_masters_to_model()
            return True
        found_inf = self.scaler.unscale(grads)
        clip_gradients(optimizer, self.clip_grad_norm)  # on unscaled gradients; an overflowed step is skipped
        if skips_on_device(optimizer):
            zero_momentum_buffers(optimizer)
            optimizer.grad_scale, optimizer.found_inf = None, found_inf  # grads are unscaled already
            try:
                optimizer.step()
            finally:
                del optimizer.grad_scale, optimizer.found_inf
            taken: Union[bool, torch.Tensor] = found_inf[0] == 0
        else:
            taken = not bool(found_inf.item())  # one host sync: this optimizer cannot skip by itself
            if taken:
                optimizer.step()
        self.scaler.update(found_inf)
        self._copy_masters_to_model()  # unchanged masters when the step was skipped
        return taken

    def _copy_masters_to_model(self) -> None:
        if self.masters:
            with torch.no_grad():
                torch._foreach_copy_(self.model_params, self.masters)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)
        for p in self.model_params:
            p.grad = None

    @property
    def loss_scale(self) -> Optional[float]:
        return self.scaler.scale if self.scaler.active else None

    @property
    def skipped_steps(self) -> int:
        return self.scaler.skipped_steps

    # -- checkpoints: O2 saves the fp32 masters, since the model holds only rounded copies
    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict(), "masters": [m.detach().clone() for m in self.masters]}

    def load_state_dict(self, state: dict) -> None:
        self.scaler.load_state_dict(state["scaler"])
        with torch.no_grad():
            for master, model_p, saved in zip(self.masters, self.model_params, state.get("masters", [])):
                master.copy_(saved)
                model_p.copy_(saved)


class ApexPrecision:
    """NVIDIA Apex AMP (``amp.initialize`` / ``amp.scale_loss``), for Apex releases <= 25.05."""

    def __init__(self, spec: PrecisionSpec, device: torch.device, clip_grad_norm: Optional[float] = None):
        self.spec = spec
        self.clip_grad_norm = clip_grad_norm
        self.amp = apex_amp()
        if self.amp is None:
            raise PrecisionError(APEX_HINT)

    def setup(self, model, optimizer):
        kwargs = {"opt_level": self.spec.level, "verbosity": 0,
                  "loss_scale": self.spec.loss_scale if self.spec.level != "O0" else None}
        if self.spec.level in ("O2", "O3"):
            kwargs["keep_batchnorm_fp32"] = self.spec.keep_bn_fp32
        return self.amp.initialize(model, optimizer, **kwargs)

    def autocast(self):
        return contextlib.nullcontext()  # Apex patches the model's forward itself

    def cast_input(self, images):
        return images

    def backward(self, loss, optimizer) -> None:
        with self.amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()

    def step(self, optimizer) -> bool:
        if self.clip_grad_norm is not None:  # Apex's documented way: its fp32 master gradients, unscaled
            torch.nn.utils.clip_grad_norm_(self.amp.master_params(optimizer), self.clip_grad_norm)
        optimizer.step()  # Apex turns this into a no-op after an overflow
        return True

    def zero_grad(self, optimizer) -> None:
        optimizer.zero_grad()  # at O2 Apex swaps in a zero_grad that takes no arguments

    @property
    def loss_scale(self) -> Optional[float]:
        try:
            return float(self.amp._amp_state.loss_scalers[0].loss_scale())
        except (AttributeError, IndexError):
            return None

    @property
    def skipped_steps(self) -> int:
        return 0  # Apex does not expose a count; it logs each overflow itself

    def state_dict(self) -> dict:
        return {"apex": self.amp.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "apex" in state:
            self.amp.load_state_dict(state["apex"])


Precision = Union[NativePrecision, ApexPrecision]  # one interface: the loop never asks which


def build(spec: PrecisionSpec, device: torch.device, clip_grad_norm: Optional[float] = None) -> Precision:
    """The precision of SPEC; CLIP_GRAD_NORM: clip the gradients' global norm to it before each step."""
    kind = ApexPrecision if spec.backend == "apex" else NativePrecision
    return kind(spec, device, clip_grad_norm)


def clip_gradients(optimizer: torch.optim.Optimizer, max_norm: Optional[float]) -> None:
    """Scale the gradients of OPTIMIZER's parameters so that their global L2 norm is at most MAX_NORM
    (None: leave them). torch's foreach kernels, no host sync, so a CUDA graph can hold it."""
    if max_norm is not None:
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, max_norm)
