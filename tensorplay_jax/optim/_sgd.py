"""``SGD``: torch's stochastic gradient descent (momentum, dampening, Nesterov) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import optax

from tensorplay_jax.optim._optimizer import Optimizer
from tensorplay_jax.optim._sparse import sgd_rows

__all__ = ["SGD", "sgd_rule"]


def sgd_rule(
    lr: Any,
    momentum: Any = 0.0,
    dampening: Any = 0.0,
    weight_decay: Any = 0.0,
    *,
    nesterov: bool = False,
    maximize: bool = False,
    momentum_on: bool = False,
) -> optax.GradientTransformation:
    """torch's SGD update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``) plus ``weight_decay * p``::

        b = g                               (first step)
        b = momentum * b + (1 - dampening) * g   (later steps)
        g = g + momentum * b  if nesterov  else  b
        p = p - lr * g

    ``optax.sgd`` starts its trace at zero, so with ``dampening`` its first step
    differs from torch's, which starts the buffer at the gradient itself; hence
    this rule. The state is ``{}`` until the first step with momentum, then
    ``{"momentum_buffer": b}`` (torch's key). Numbers may be traced;
    ``momentum_on`` (``momentum != 0``) picks the program.

    Example:
      >>> import jax.numpy as jnp
      >>> tx = sgd_rule(0.1, momentum=0.9, momentum_on=True)
      >>> p, g = jnp.ones(2), jnp.full(2, 2.0)
      >>> u, s = tx.update(g, tx.init(p), p)     # first step: b = g
      >>> u, s = tx.update(g, s, p)              # b = 0.9 * 2 + 2 = 3.8
      >>> print(u, s["momentum_buffer"])
      [-0.38 -0.38] [3.8 3.8]
    """

    def init(params: Any) -> dict[str, Any]:
        return {}

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        g = g + weight_decay * params
        if momentum_on:
            buf = state.get("momentum_buffer")
            buf = g if buf is None else momentum * buf + (1 - dampening) * g
            state = {"momentum_buffer": buf}
            g = g + momentum * buf if nesterov else buf
        return -lr * g, state

    return optax.GradientTransformation(init, update)


class SGD(Optimizer):
    """Stochastic gradient descent, torch's ``torch.optim.SGD``.

    The update is :func:`sgd_rule` (torch's documented algorithm: weight decay
    added to the gradient, momentum buffer started at the first gradient,
    ``dampening`` and ``nesterov`` as torch applies them).

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      momentum: momentum factor.
      dampening: dampening for momentum.
      weight_decay: L2 penalty (added to the gradient).
      nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``momentum`` or ``weight_decay``, or
        ``nesterov`` without momentum or with dampening.

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> model = tp.nn.Linear(2, 1)
      >>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
      >>> opt.zero_grad()
      >>> model(tp.ones(4, 2)).sum().backward()
      >>> opt.step()
      >>> sorted(opt.state_dict()["state"][0])
      ['momentum_buffer']
    """

    _RULE = staticmethod(sgd_rule)
    _STATIC = ("nesterov", "maximize")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _flags(self, group: dict[str, Any]) -> dict[str, Any]:
        return {**super()._flags(group), "momentum_on": group["momentum"] != 0}

    def _sparse_step(self, group: dict[str, Any], p: Any, g: Any, donate: bool) -> Any:
        """A sparse gradient moves only its rows (``optim._sparse``); torch's momentum and
        weight decay would make the update dense, and are refused for one here."""
        if group["momentum"] != 0 or group["weight_decay"] != 0:
            raise NotImplementedError(
                "SGD: a sparse gradient is stepped without momentum and weight_decay here "
                f"(got momentum={group['momentum']!r}, weight_decay={group['weight_decay']!r}); "
                "set both to 0, or use optim.SparseAdam, or a dense gradient"
            )
        return sgd_rows(p.value, g, float(group["lr"]), group["maximize"], donate)

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "momentum", "weight_decay")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                f"SGD: nesterov=True requires momentum > 0 and dampening=0, got "
                f"momentum={group['momentum']!r}, dampening={group['dampening']!r}"
            )
