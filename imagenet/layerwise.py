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
for the no-decay group that :func:`imagenet.optim.param_groups` makes), so LARS and LAMB leave out
the same parameters.

LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning") is written here too, for the
same reason: Adam's bias-corrected update plus weight decay, scaled per tensor by ``|w| / |update|``
(1 where either is 0), for the parameters with ``adapt``; the others take the Adam step with no
decay. Unlike timm's ``Lamb`` it does not clip the global gradient norm first (timm's
``max_grad_norm=1.0`` default) and never clips the trust ratio.
"""
from __future__ import annotations

from typing import Iterable, Tuple

import torch

KERAS_EPSILON = 1e-7  # what the MLPerf reference's LARS uses when given lars_epsilon=0


def trust_ratio(weight_norm: torch.Tensor, update_norm: torch.Tensor, numerator: torch.Tensor,
                denominator: torch.Tensor) -> torch.Tensor:
    """NUMERATOR / DENOMINATOR where both norms are positive, else 1 (no host sync)."""
    positive = (weight_norm > 0) & (update_norm > 0)
    return torch.where(positive, numerator / denominator, torch.ones_like(numerator))


class _PerTensor(torch.optim.Optimizer):
    """An optimizer whose update is one tensor at a time (each needs its own norms)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def _update(self, param: torch.Tensor, group: dict) -> None:
        raise NotImplementedError


class Lars(_PerTensor):
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

    def _update(self, param: torch.Tensor, group: dict) -> None:
        grad, lr = param.grad, group["lr"]
        if group["adapt"]:
            decay = group["weight_decay"]
            weight_norm, grad_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(grad)
            trust = trust_ratio(weight_norm, grad_norm, group["coefficient"] * weight_norm,
                                grad_norm + decay * weight_norm + group["eps"])
            scaled_grad = (grad + decay * param) * (trust * lr)
        else:
            scaled_grad = grad * lr
        state = self.state[param]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(param)
        buffer = state["momentum_buffer"]
        buffer.mul_(group["momentum"]).add_(scaled_grad)
        if group["nesterov"]:
            param.sub_(buffer * group["momentum"] + scaled_grad)
        else:
            param.sub_(buffer)


class Lamb(_PerTensor):
    """LAMB: a per-tensor trust ratio on Adam's step (see the module docstring).

    Group options: ``lr``, ``betas``, ``eps``, ``weight_decay``, ``adapt`` (False: Adam's step without
    weight decay or trust ratio).
    """

    def __init__(self, params: Iterable, lr: float, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= beta < 1 for beta in betas):
            raise ValueError(f"LAMB needs lr, eps, weight_decay >= 0 and betas in [0, 1) (got lr {lr}, betas "
                             f"{betas}, eps {eps}, weight_decay {weight_decay})")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "adapt": True})

    def _update(self, param: torch.Tensor, group: dict) -> None:
        beta1, beta2 = group["betas"]
        state = self.state[param]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        state["step"] += 1
        step, grad = state["step"], param.grad
        state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        mean = state["exp_avg"] / (1 - beta1 ** step)
        variance = state["exp_avg_sq"] / (1 - beta2 ** step)
        update = mean / (variance.sqrt() + group["eps"])
        if group["adapt"]:
            update = update + group["weight_decay"] * param
            weight_norm, update_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(update)
            update = update * trust_ratio(weight_norm, update_norm, weight_norm, update_norm)
        param.sub_(update * group["lr"])
