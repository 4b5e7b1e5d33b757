"""``Adagrad``: torch's Adagrad (learning-rate decay, initial accumulator) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["Adagrad", "adagrad_rule"]


def adagrad_rule(
    lr: Any,
    lr_decay: Any = 0.0,
    weight_decay: Any = 0.0,
    initial_accumulator_value: Any = 0.0,
    eps: Any = 1e-10,
    *,
    maximize: bool = False,
) -> optax.GradientTransformation:
    """torch's Adagrad update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``) plus ``weight_decay * p``
    and ``t`` the step count::

        s = s + g^2        (s starts at initial_accumulator_value)
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)

    ``optax.adagrad`` adds ``eps`` inside the square root and has no
    ``lr_decay``, hence this rule. The state has torch's keys (``step``, ``sum``).

    Example:
      >>> import jax.numpy as jnp
      >>> tx = adagrad_rule(0.5)
      >>> p = jnp.zeros(1)
      >>> u, s = tx.update(jnp.array([4.0]), tx.init(p), p)   # s = 16, step g / 4
      >>> print(u, s["sum"])
      [-0.5] [16.]
    """

    def init(params: Any) -> dict[str, Any]:
        return {
            "step": jnp.zeros((), jnp.float32),
            "sum": jnp.full_like(params, initial_accumulator_value),
        }

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        g = g + weight_decay * params
        step = state["step"] + 1
        clr = lr / (1 + (step - 1) * lr_decay)
        total = state["sum"] + g * g
        return -clr * (g / (jnp.sqrt(total) + eps)), {"step": step, "sum": total}

    return optax.GradientTransformation(init, update)


class Adagrad(Optimizer):
    """Adagrad, torch's ``torch.optim.Adagrad``: the update is :func:`adagrad_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      lr_decay: learning-rate decay per step.
      weight_decay: L2 penalty (added to the gradient).
      initial_accumulator_value: the sum of squares' starting value.
      eps: added to the denominator.
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``lr_decay``, ``weight_decay``,
        ``initial_accumulator_value`` or ``eps``.

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(1))
      >>> opt = optim.Adagrad([w], lr=0.5)
      >>> w.grad = tp.tensor([4.0])
      >>> opt.step()
      >>> w.item()
      -0.5
    """

    _RULE = staticmethod(adagrad_rule)
    _STATIC = ("maximize",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(
            group, "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"
        )
