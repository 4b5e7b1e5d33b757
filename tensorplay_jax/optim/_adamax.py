"""``Adamax``: torch's Adamax (Adam with an infinity-norm denominator) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["Adamax", "adamax_rule"]


def adamax_rule(
    lr: Any = 2e-3,
    betas: tuple[Any, Any] = (0.9, 0.999),
    eps: Any = 1e-8,
    weight_decay: Any = 0.0,
    *,
    maximize: bool = False,
) -> optax.GradientTransformation:
    """torch's Adamax update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``) plus ``weight_decay * p``,
    ``t`` the step count and ``(b1, b2) = betas``::

        m = b1 * m + (1 - b1) * g
        u = max(b2 * u, |g| + eps)
        p = p - lr / (1 - b1^t) * m / u

    ``optax.adamax`` takes the same step, but its state is a chain of named
    tuples (an int32 ``count``, ``mu``, ``nu``) and it has neither an L2
    ``weight_decay`` in the gradient nor ``maximize``; this rule's state has
    torch's keys (``step`` as float32, ``exp_avg``, ``exp_inf``), so that a
    torch state dict loads.

    Example:
      >>> import jax.numpy as jnp
      >>> tx = adamax_rule(0.5, betas=(0.5, 0.999), eps=1.0)
      >>> p = jnp.zeros(2)
      >>> u, s = tx.update(jnp.array([3.0, -1.0]), tx.init(p), p)   # exp_inf = |g| + eps
      >>> print(u, s["exp_avg"], s["exp_inf"])   # u = -0.5 / (1 - 0.5) * exp_avg / exp_inf
      [-0.375  0.25 ] [ 1.5 -0.5] [4. 2.]
    """
    b1, b2 = betas

    def init(params: Any) -> dict[str, Any]:
        return {
            "step": jnp.zeros((), jnp.float32),
            "exp_avg": jnp.zeros_like(params),
            "exp_inf": jnp.zeros_like(params),
        }

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        g = g + weight_decay * params
        step = state["step"] + 1
        m = state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])
        u = jnp.maximum(b2 * state["exp_inf"], jnp.abs(g) + eps)
        new = {"step": step, "exp_avg": m, "exp_inf": u}
        return -(lr / (1 - b1**step)) * (m / u), new

    return optax.GradientTransformation(init, update)


class Adamax(Optimizer):
    """Adamax, torch's ``torch.optim.Adamax``: the update is :func:`adamax_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      betas: decay rates of the first moment and of the infinity norm.
      eps: added to the gradient's magnitude before the infinity norm's maximum.
      weight_decay: L2 penalty (added to the gradient).
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``eps`` or ``weight_decay``, or a beta outside [0, 1).

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(1))
      >>> opt = optim.Adamax([w], lr=0.1)
      >>> for g in (2.0, 1.0):   # exp_inf keeps 0.999 * 2 over |1|: the second step is smaller
      ...     w.grad = tp.tensor([g])
      ...     opt.step()
      >>> round(w.item(), 6)     # -0.1, then -0.1 / 0.19 * 0.28 / 1.998
      -0.173758
    """

    _RULE = staticmethod(adamax_rule)
    _STATIC = ("maximize",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize
        )
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "eps", "weight_decay")
        self._betas(group)
