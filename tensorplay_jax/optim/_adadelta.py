"""``Adadelta``: torch's Adadelta (averages of squared gradients and steps) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["Adadelta", "adadelta_rule"]


def adadelta_rule(
    lr: Any = 1.0,
    rho: Any = 0.9,
    eps: Any = 1e-6,
    weight_decay: Any = 0.0,
    *,
    maximize: bool = False,
) -> optax.GradientTransformation:
    """torch's Adadelta update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``) plus ``weight_decay * p``::

        v = rho * v + (1 - rho) * g^2
        d = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * d^2
        p = p - lr * d

    ``optax.adadelta`` takes the same step, but its state is a chain of named
    tuples (``e_g``, ``e_x``) without a step count, and it has no ``maximize``;
    this rule's state has torch's keys (``step``, ``square_avg``, ``acc_delta``),
    so that a torch state dict loads.

    Example:
      >>> import jax.numpy as jnp
      >>> tx = adadelta_rule(rho=0.25, eps=1.0)
      >>> p = jnp.zeros(1)
      >>> u, s = tx.update(jnp.array([2.0]), tx.init(p), p)   # v = 3, d = sqrt(1) / sqrt(4) * 2
      >>> print(u, s["square_avg"], s["acc_delta"])
      [-1.] [3.] [0.75]
    """

    def init(params: Any) -> dict[str, Any]:
        return {
            "step": jnp.zeros((), jnp.float32),
            "square_avg": jnp.zeros_like(params),
            "acc_delta": jnp.zeros_like(params),
        }

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        g = g + weight_decay * params
        v = rho * state["square_avg"] + (1 - rho) * g * g
        d = jnp.sqrt(state["acc_delta"] + eps) / jnp.sqrt(v + eps) * g
        u = rho * state["acc_delta"] + (1 - rho) * d * d
        new = {"step": state["step"] + 1, "square_avg": v, "acc_delta": u}
        return -lr * d, new

    return optax.GradientTransformation(init, update)


class Adadelta(Optimizer):
    """Adadelta, torch's ``torch.optim.Adadelta``: the update is :func:`adadelta_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: scales the step before it is applied to the parameters.
      rho: smoothing constant of the running averages (squared gradients and steps).
      eps: added inside both square roots.
      weight_decay: L2 penalty (added to the gradient).
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``eps`` or ``weight_decay``, or ``rho`` outside [0, 1].

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(1))
      >>> opt = optim.Adadelta([w], eps=0.01)
      >>> w.grad = tp.tensor([3.0])
      >>> opt.step()                # v = 0.9 and the step is sqrt(0.01) / sqrt(0.91) * 3
      >>> round(w.item(), 6)
      -0.314485
    """

    _RULE = staticmethod(adadelta_rule)
    _STATIC = ("maximize",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "rho", "eps", "weight_decay")
        if group["rho"] > 1:
            raise ValueError(
                f"{type(self).__name__}: invalid rho={group['rho']!r}; it must be a number "
                "in [0, 1]"
            )
