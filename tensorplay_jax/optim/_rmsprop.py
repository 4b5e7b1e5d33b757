"""``RMSprop``: torch's RMSprop (centered, momentum) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["RMSprop", "rmsprop_rule"]


def rmsprop_rule(
    lr: Any,
    alpha: Any = 0.99,
    eps: Any = 1e-8,
    weight_decay: Any = 0.0,
    momentum: Any = 0.0,
    *,
    centered: bool = False,
    maximize: bool = False,
    momentum_on: bool = False,
) -> optax.GradientTransformation:
    """torch's RMSprop update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``) plus ``weight_decay * p``::

        v = alpha * v + (1 - alpha) * g^2
        a = alpha * a + (1 - alpha) * g          (centered)
        d = sqrt(v - a^2 if centered else v) + eps
        b = momentum * b + g / d;  p = p - lr * b    (momentum > 0)
        p = p - lr * g / d                           (otherwise)

    ``optax.rmsprop`` adds ``eps`` inside the square root; torch adds it after,
    which changes the step where ``v`` is small, hence this rule. The state has
    torch's keys (``step``, ``square_avg``, ``grad_avg``, ``momentum_buffer``).

    Example:
      >>> import jax.numpy as jnp
      >>> tx = rmsprop_rule(0.01, alpha=0.75)
      >>> p = jnp.zeros(1)
      >>> u, s = tx.update(jnp.array([2.0]), tx.init(p), p)   # v = 0.25 * 4 = 1
      >>> print(u, s["square_avg"])
      [-0.02] [1.]
    """

    def init(params: Any) -> dict[str, Any]:
        s = {"step": jnp.zeros((), jnp.float32), "square_avg": jnp.zeros_like(params)}
        if momentum_on:
            s["momentum_buffer"] = jnp.zeros_like(params)
        if centered:
            s["grad_avg"] = jnp.zeros_like(params)
        return s

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        g = g + weight_decay * params
        v = alpha * state["square_avg"] + (1 - alpha) * g * g
        new = {"step": state["step"] + 1, "square_avg": v}
        if centered:
            a = state["grad_avg"] + (1 - alpha) * (g - state["grad_avg"])
            new["grad_avg"] = a
            d = jnp.sqrt(v - a * a) + eps
        else:
            d = jnp.sqrt(v) + eps
        if momentum_on:
            b = new["momentum_buffer"] = momentum * state["momentum_buffer"] + g / d
            return -lr * b, new
        return -lr * (g / d), new

    return optax.GradientTransformation(init, update)


class RMSprop(Optimizer):
    """RMSprop, torch's ``torch.optim.RMSprop``: the update is :func:`rmsprop_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      alpha: smoothing constant of the squared-gradient average.
      eps: added to the denominator.
      weight_decay: L2 penalty (added to the gradient).
      momentum: momentum factor.
      centered: normalise by the estimated variance of the gradient.
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``alpha``, ``eps``, ``momentum`` or ``weight_decay``.

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(1))
      >>> opt = optim.RMSprop([w], lr=0.01, alpha=0.75)
      >>> w.grad = tp.tensor([-2.0])
      >>> opt.step()
      >>> round(w.item(), 6)
      0.02
    """

    _RULE = staticmethod(rmsprop_rule)
    _STATIC = ("centered", "maximize")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _flags(self, group: dict[str, Any]) -> dict[str, Any]:
        return {**super()._flags(group), "momentum_on": group["momentum"] > 0}

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "alpha", "eps", "momentum", "weight_decay")
