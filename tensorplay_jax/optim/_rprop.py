"""``Rprop``: torch's resilient backpropagation (per-element step sizes, signs) as an optax rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["Rprop", "rprop_rule"]


def _step_factor(agreement: Any, etaminus: Any, etaplus: Any) -> Any:
    """Each element's step-size factor from ``g * prev``: ``etaplus`` where the gradient kept
    its sign, ``etaminus`` where it changed it, 1 where either is zero (NaN stays NaN)."""
    s = jnp.sign(agreement)
    one = jnp.ones_like(s)
    return jnp.select([s > 0, s < 0, s == 0], [etaplus * one, etaminus * one, one], s)


def rprop_rule(
    lr: Any = 1e-2,
    etas: tuple[Any, Any] = (0.5, 1.2),
    step_sizes: tuple[Any, Any] = (1e-6, 50),
    *,
    maximize: bool = False,
) -> optax.GradientTransformation:
    """torch's Rprop update for one parameter, as an ``optax.GradientTransformation``.

    With ``g`` the gradient (negated when ``maximize``), ``prev`` the gradient the
    last step used and ``(etaminus, etaplus) = etas``, per element::

        f = etaplus if g * prev > 0, etaminus if g * prev < 0, else 1
        step_size = clip(step_size * f, *step_sizes)      (step_size starts at lr)
        g = 0 where g * prev < 0                          (a sign change: no move)
        p = p - sign(g) * step_size;  prev = g

    ``lr`` is only the step sizes' starting value (read when the state is made,
    as torch reads it at the first step). ``optax.rprop`` keeps the last update
    rather than the gradient, leaves a step size unclipped where ``g * prev`` is
    zero (torch clips it: an ``lr`` above the maximum is cut at the first step)
    and has no ``maximize``, hence this rule. The state has torch's keys
    (``step``, ``prev``, ``step_size``).

    Example:
      >>> import jax.numpy as jnp
      >>> tx = rprop_rule(0.1)
      >>> p = jnp.zeros(2)
      >>> u, s = tx.update(jnp.array([3.0, -2.0]), tx.init(p), p)   # prev 0: factor 1
      >>> u, s = tx.update(jnp.array([1.0, 4.0]), s, p)   # same sign: 1.2; changed: 0.5
      >>> print(p + u, s["step_size"], s["prev"])   # the second step's move (no -0.)
      [-0.12  0.  ] [0.12 0.05] [1. 0.]
    """

    etaminus, etaplus = etas
    step_size_min, step_size_max = step_sizes

    def init(params: Any) -> dict[str, Any]:
        return {
            "step": jnp.zeros((), jnp.float32),
            "prev": jnp.zeros_like(params),
            "step_size": jnp.full_like(params, lr),
        }

    def update(grad: Any, state: dict[str, Any], params: Any = None) -> tuple[Any, dict]:
        g = -grad if maximize else grad
        agreement = g * state["prev"]
        factor = _step_factor(agreement, etaminus, etaplus)
        size = jnp.clip(state["step_size"] * factor, step_size_min, step_size_max)
        g = jnp.where(agreement < 0, jnp.zeros_like(g), g)
        new = {"step": state["step"] + 1, "prev": g, "step_size": size}
        return -jnp.sign(g) * size, new

    return optax.GradientTransformation(init, update)


class Rprop(Optimizer):
    """Rprop, torch's ``torch.optim.Rprop``: the update is :func:`rprop_rule`.

    Args:
      params: parameters, or param groups (dicts).
      lr: each element's first step size.
      etas: ``(etaminus, etaplus)``, the factors a step size is multiplied by when the
        gradient changes sign and when it keeps it.
      step_sizes: ``(min, max)``, the bounds of the step sizes.
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a negative ``lr``, ``etas`` not two numbers with
        ``0 < etaminus < 1 < etaplus``, or ``step_sizes`` not two numbers.

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.zeros(2))
      >>> opt = optim.Rprop([w], lr=0.1)
      >>> for g in ([3.0, -2.0], [1.0, -4.0]):   # the same signs: the steps grow by 1.2
      ...     w.grad = tp.tensor(g)
      ...     opt.step()
      >>> [round(v, 6) for v in w.tolist()]
      [-0.22, 0.22]
    """

    _RULE = staticmethod(rprop_rule)
    _STATIC = ("maximize",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize)
        super().__init__(params, defaults)

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr")
        name = type(self).__name__
        etas, sizes = group["etas"], group["step_sizes"]
        if not (_pair(etas) and 0 < etas[0] < 1 < etas[1]):
            raise ValueError(
                f"{name}: invalid etas={etas!r}; it must be two numbers (etaminus, etaplus) "
                "with 0 < etaminus < 1 < etaplus, e.g. (0.5, 1.2)"
            )
        if not _pair(sizes):
            raise ValueError(
                f"{name}: invalid step_sizes={sizes!r}; it must be two numbers (min, max), "
                "e.g. (1e-6, 50)"
            )


def _pair(v: Any) -> bool:
    """Whether ``v`` is two numbers (a tuple or list; bools are not numbers here)."""
    return (
        isinstance(v, tuple | list)
        and len(v) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
    )
