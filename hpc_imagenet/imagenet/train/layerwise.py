"""Layer-wise adaptive optimizers for large global batches: LARS (MLPerf's) and LAMB.

Why our own code: torch has no LARS (pytorch/pytorch#18414 is open), and the library versions
differ from the reference that the ``mlperf`` recipe cites. That reference is MLPerf Training's
ResNet-50, ``image_classification/tensorflow2/lars_optimizer.py`` in mlcommons/training:

- trust ratio ``coefficient * |w| / (|g| + weight_decay * |w| + eps)``, and 1 where ``|w|`` or
  ``|g|`` is 0;
- the weight decay is added to the gradient *after* the trust ratio is computed;
- the learning rate enters the momentum buffer: ``v = momentum * v + lr * trust * g``, ``w -= v``;
- parameters left out (its ``skip_list``: BatchNorm and bias) get neither the trust ratio nor weight
  decay: they are plain momentum SGD;
- ``eps``: the reference passes ``lars_epsilon=0``, which its constructor replaces by Keras'
  default epsilon, 1e-7.

timm's ``Lars`` applies the learning rate outside the momentum (``v = momentum * v + trust * g``,
``w -= lr * v``). The two agree while the LR is constant and differ whenever it changes (every step
of warm-up and decay): with the LR inside, the momentum carries each step's own LR forward; outside,
the old gradients are re-weighted by the new LR. timm also adapts by weight decay, not by a skip
list, and would add a dependency (timm, huggingface_hub, safetensors and their HTTP stack) for
about forty lines. Which parameters are left out is a parameter-group option here, ``adapt`` (False
for the no-decay group that :func:`hpc_imagenet.imagenet.train.optim.param_groups` makes), so LARS and LAMB leave out
the same parameters.

LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning") is written here too, for the
same reason: Adam's bias-corrected update plus weight decay, scaled per tensor by ``|w| / |update|``
(1 where either is 0), for the parameters with ``adapt``; the others take the Adam step with no
decay. With ``max_grad_norm`` it first divides every gradient by ``max(1, global norm /
max_grad_norm)``, the norm taken over all parameters of all groups, as timm's ``Lamb`` does
(``timm/optim/lamb.py``, ``_get_clip_grad_norm``; 1.0 there by default, None here so that a run
asks for it); it never clips the trust ratio (timm's ``trust_clip`` off).
"""
from __future__ import annotations

from typing import Iterable, Optional, Tuple

import torch

KERAS_EPSILON = 1e-7  # what the MLPerf reference's LARS uses when given lars_epsilon=0


def trust_ratio(weight_norm: torch.Tensor, update_norm: torch.Tensor, numerator: torch.Tensor,
                denominator: torch.Tensor) -> torch.Tensor:
    """NUMERATOR / DENOMINATOR where both norms are positive, else 1 (no host sync)."""
    positive = (weight_norm > 0) & (update_norm > 0)
    return torch.where(positive, numerator / denominator, torch.ones_like(numerator))


class _Layerwise(torch.optim.Optimizer):
    """An optimizer updated one parameter group at a time with torch's list (``_foreach``) kernels.

    Each tensor needs its own norms; one tensor at a time, ResNet-50's 161 tensors cost ~1,600 kernel
    launches a step: on an H200 (ResNet-50, batch 256, fp16) LARS took 55.5 ms a step that way against
    SGD's 42.7, and 44.2 ms with the list kernels (results/records/gpu-h200.jsonl, lines 3 and 11)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._before_update()
        for group in self.param_groups:
            params = [param for param in group["params"] if param.grad is not None]
            if params:
                self._update_group(params, group)
        return loss

    def _before_update(self) -> None:
        """What an optimizer does to all the gradients at once before its groups' updates (nothing here)."""

    def _update_group(self, params: list, group: dict) -> None:
        raise NotImplementedError


def _norms(tensors: list) -> torch.Tensor:
    """Each tensor's L2 norm, as one vector."""
    return torch.stack(torch._foreach_norm(tensors))


class Lars(_Layerwise):
    """LARS exactly as MLPerf's reference applies it (see the module docstring).

    Group options: ``lr``, ``momentum``, ``weight_decay``, ``coefficient`` (the reference's eeta),
    ``eps``, ``nesterov``, ``adapt`` (False: plain momentum SGD without weight decay).
    """

    def __init__(self, params: Iterable, lr: float, momentum: float = 0.9, weight_decay: float = 1e-4,
                 coefficient: float = 0.001, eps: float = KERAS_EPSILON, nesterov: bool = False):
        if lr < 0 or momentum < 0 or weight_decay < 0 or coefficient <= 0 or eps < 0:
            raise ValueError(f"LARS needs lr, momentum, weight_decay, eps >= 0 and coefficient > 0 (got lr {lr}, "
                             f"momentum {momentum}, weight_decay {weight_decay}, coefficient {coefficient}, eps {eps})")
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "coefficient": coefficient,
                    "eps": eps, "nesterov": nesterov, "adapt": True}
        super().__init__(params, defaults)

    def _update_group(self, params: list, group: dict) -> None:
        grads, lr = [param.grad for param in params], group["lr"]
        if group["adapt"]:
            decay = group["weight_decay"]
            weight_norms, grad_norms = _norms(params), _norms(grads)
            trust = trust_ratio(weight_norms, grad_norms, group["coefficient"] * weight_norms,
                                grad_norms + decay * weight_norms + group["eps"])
            scaled_grads = torch._foreach_add(grads, params, alpha=decay)
            torch._foreach_mul_(scaled_grads, list((trust * lr).unbind()))
        else:
            scaled_grads = torch._foreach_mul(grads, lr)
        buffers = [self._momentum_buffer(param) for param in params]
        torch._foreach_mul_(buffers, group["momentum"])
        torch._foreach_add_(buffers, scaled_grads)
        if group["nesterov"]:
            torch._foreach_sub_(params, torch._foreach_add(scaled_grads, buffers, alpha=group["momentum"]))
        else:
            torch._foreach_sub_(params, buffers)

    def _momentum_buffer(self, param: torch.Tensor) -> torch.Tensor:
        state = self.state[param]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(param)
        return state["momentum_buffer"]


class Lamb(_Layerwise):
    """LAMB: a per-tensor trust ratio on Adam's step (see the module docstring).

    Group options: ``lr``, ``betas``, ``eps``, ``weight_decay``, ``adapt`` (False: Adam's step without
    weight decay or trust ratio). ``max_grad_norm`` (None: off) clips the global gradient norm first.
    """

    def __init__(self, params: Iterable, lr: float, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, max_grad_norm: Optional[float] = None):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= beta < 1 for beta in betas) or (
                max_grad_norm is not None and max_grad_norm <= 0):
            raise ValueError(f"LAMB needs lr, eps, weight_decay >= 0, betas in [0, 1) and max_grad_norm None or > 0 "
                             f"(got lr {lr}, betas {betas}, eps {eps}, weight_decay {weight_decay}, max_grad_norm "
                             f"{max_grad_norm})")
        self.max_grad_norm = max_grad_norm
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "adapt": True})

    def _before_update(self) -> None:
        if self.max_grad_norm is not None:
            self._clip_global_norm(self.max_grad_norm)

    def _clip_global_norm(self, max_norm: float) -> None:
        """Divide every gradient by max(1, global norm / MAX_NORM), on the device (no host sync)."""
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        if grads:
            divisor = (torch.linalg.vector_norm(_norms(grads)) / max_norm).clamp_(min=1.0)
            torch._foreach_div_(grads, [divisor] * len(grads))

    def _update_group(self, params: list, group: dict) -> None:
        beta1, beta2 = group["betas"]
        grads, states = [param.grad for param in params], [self._state(param) for param in params]
        exp_avgs, exp_avg_sqs = [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        # bias corrections per tensor: a tensor that had no gradient at some step has a smaller count
        means = torch._foreach_div(exp_avgs, [1 - beta1 ** st["step"] for st in states])
        denominators = torch._foreach_sqrt(torch._foreach_div(exp_avg_sqs, [1 - beta2 ** st["step"] for st in states]))
        torch._foreach_add_(denominators, group["eps"])
        updates = torch._foreach_div(means, denominators)
        if group["adapt"]:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
            weight_norms, update_norms = _norms(params), _norms(updates)
            torch._foreach_mul_(updates, list(trust_ratio(weight_norms, update_norms, weight_norms,
                                                          update_norms).unbind()))
        torch._foreach_mul_(updates, group["lr"])
        torch._foreach_sub_(params, updates)

    def _state(self, param: torch.Tensor) -> dict:
        """The tensor's Adam moments, its step count advanced by one."""
        state = self.state[param]
        if not state:
            state.update(step=0, exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))
        state["step"] += 1
        return state
