"""``Adam`` and ``AdamW``: torch's Adam (L2 or decoupled weight decay, AMSGrad) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["Adam", "AdamW", "adam_rule"]


def adam_rule(
    lr: Any,
    betas: tuple[Any, Any] = (0.9, 0.999),
    eps: Any = 1e-8,
    weight_decay: Any = 0.0,
    *,
    amsgrad: bool = False,
    maximize: bool = False,
    decoupled: bool = False,
) -> optax.GradientTransformation:
    """torch's Adam (``decoupled``: AdamW) update for one parameter, as an optax transformation.

    With ``g`` the gradient (negated when ``maximize``), ``t`` the step count::

        g = g + weight_decay * p          (Adam: L2 penalty in the gradient)
        p = p * (1 - lr * weight_decay)   (AdamW: decoupled, instead)
        m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
        v_max = max(v_max, v)             (amsgrad; the uncorrected v, as torch)
        p = p - lr / (1 - b1^t) * m / (sqrt(v or v_max) / sqrt(1 - b2^t) + eps)

    ``optax.adam`` computes the same moments, but its AMSGrad takes the maximum
    of the bias-corrected ``v`` (torch: of ``v``, corrected after) and its state
    has an int32 count and no torch names; this rule keeps torch's state keys
    (``step`` as float32, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``), so a
    state dict loads either way.

    Example:
      >>> import jax.numpy as jnp
      >>> tx = adam_rule(0.1)
      >>> p = jnp.zeros(2)
      >>> u, s = tx.update(jnp.array([3.0, -0.5]), tx.init(p), p)
      >>> [round(float(x), 4) for x in u]   # the first Adam step is -lr * sign(g)
      [-0.1, 0.1]
      >>> sorted(s)
      ['exp_avg', 'exp_avg_sq', 'step']
    """
    b1, b2 = betas

    def init(params: Any) -> dict[str, Any]:
        s = {
            "step": jnp.zeros((), jnp.float32),
            "exp_avg": jnp.zeros_like(params),
            "exp_avg_sq": jnp.zeros_like(params),
        }
        if amsgrad:
            s["max_exp_avg_sq"] = jnp.zeros_like(params)
        return s

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        decay = 0.0
        if decoupled:
            decay = -lr * weight_decay * params
        else:
            g = g + weight_decay * params
        step = state["step"] + 1
        m = state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])
        v = b2 * state["exp_avg_sq"] + (1 - b2) * g * g
        new = {"step": step, "exp_avg": m, "exp_avg_sq": v}
        if amsgrad:
            v = new["max_exp_avg_sq"] = jnp.maximum(state["max_exp_avg_sq"], v)
        step_size = lr / (1 - b1**step)
        denom = jnp.sqrt(v) / jnp.sqrt(1 - b2**step) + eps
        return decay - step_size * (m / denom), new

    return optax.GradientTransformation(init, update)


class Adam(Optimizer):
    """Adam, torch's ``torch.optim.Adam``: the update is :func:`adam_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      betas: decay rates of the first and second moment estimates.
      eps: added to the denominator.
      weight_decay: L2 penalty (added to the gradient).
      amsgrad: use the maximum of past second moments (AMSGrad).
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``eps`` or ``weight_decay``, or a beta outside [0, 1).

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(2))
      >>> opt = optim.Adam([w], lr=0.1)
      >>> (w * tp.tensor([3.0, -0.5])).sum().backward()
      >>> opt.step()
      >>> w                          # the first Adam step is -lr * sign(grad)
      Parameter containing:
      tensor([-0.1,  0.1], requires_grad=True)
    """

    _RULE = staticmethod(adam_rule)
    _STATIC = ("amsgrad", "maximize")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _flags(self, group: dict[str, Any]) -> dict[str, Any]:
        return {**super()._flags(group), "decoupled": isinstance(self, AdamW)}

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "eps", "weight_decay")
        self._betas(group)


class AdamW(Adam):
    """AdamW, torch's ``torch.optim.AdamW``: Adam with decoupled weight decay.

    The parameter shrinks by ``lr * weight_decay`` before the Adam step, instead
    of the penalty entering the gradient (:func:`adam_rule` with ``decoupled``).
    Its arguments and errors are :class:`Adam`'s, but for ``weight_decay``: the
    decoupled decay, 1e-2 by default (torch's).

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.ones(2))
      >>> opt = optim.AdamW([w], lr=0.1, weight_decay=0.5)
      >>> w.grad = tp.zeros(2)      # no gradient: only the decay moves w
      >>> opt.step()
      >>> w
      Parameter containing:
      tensor([0.95, 0.95], requires_grad=True)
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
