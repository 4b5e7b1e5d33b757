"""``kl_divergence(p, q)``, torch's ``torch.distributions.kl``: one rule per pair of types,
looked up in a table (``register_kl`` adds one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply
from tensorplay_jax.distributions._bernoulli import Bernoulli
from tensorplay_jax.distributions._categorical import Categorical
from tensorplay_jax.distributions._normal import Normal
from tensorplay_jax.tensors import Tensor

__all__ = ["kl_divergence", "register_kl"]

_RULES: dict[tuple[type, type], Callable[[Any, Any], Tensor]] = {}


def register_kl(type_p: type, type_q: type) -> Callable[[Callable[..., Tensor]], Callable]:
    """Decorator: ``fn(p, q)`` is the KL divergence of a ``type_p`` from a ``type_q``."""

    def add(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        _RULES[(type_p, type_q)] = fn
        return fn

    return add


def kl_divergence(p: Any, q: Any) -> Tensor:
    """``KL(p || q)`` per batch entry.

    Raises:
        NotImplementedError: no rule for the pair of types.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributions import Normal, kl_divergence
        >>> round(kl_divergence(Normal(0.0, 1.0), Normal(1.0, 2.0)).item(), 4)
        0.4431
    """
    for (tp_, tq), fn in _RULES.items():
        if isinstance(p, tp_) and isinstance(q, tq):
            return fn(p, q)
    raise NotImplementedError(
        f"No KL(p || q) is implemented for p {type(p).__name__} and q {type(q).__name__}"
    )


def _normal_normal(p_loc: jax.Array, p_scale: jax.Array, q_loc: jax.Array, q_scale: jax.Array):
    var_ratio = (p_scale / q_scale) ** 2
    t1 = ((p_loc - q_loc) / q_scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - jnp.log(var_ratio))


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    return apply(_normal_normal, p.loc, p.scale, q.loc, q.scale)


def _categorical(
    p_logits: jax.Array, q_logits: jax.Array, p_probs: jax.Array, q_probs: jax.Array
) -> jax.Array:
    # a probability given as 0 makes the term 0 (in p) or infinite (in q), as torch's
    t = p_probs * (p_logits - q_logits)
    t = jnp.where(jnp.broadcast_to(q_probs == 0, t.shape), jnp.inf, t)
    t = jnp.where(jnp.broadcast_to(p_probs == 0, t.shape), 0.0, t)
    return jnp.sum(t, axis=-1)


@register_kl(Categorical, Categorical)
def _kl_categorical(p: Categorical, q: Categorical) -> Tensor:
    return apply(_categorical, p.logits, q.logits, p.probs, q.probs)


def _bernoulli(p_logits: jax.Array, q_logits: jax.Array, p: jax.Array, q: jax.Array) -> jax.Array:
    sp = jax.nn.softplus
    t1 = p * (sp(-q_logits) - sp(-p_logits))
    t1 = jnp.where(q == 0, jnp.inf, t1)
    t1 = jnp.where(p == 0, 0.0, t1)
    t2 = (1 - p) * (sp(q_logits) - sp(p_logits))
    t2 = jnp.where(q == 1, jnp.inf, t2)
    t2 = jnp.where(p == 1, 0.0, t2)
    return t1 + t2


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    return apply(_bernoulli, p.logits, q.logits, p.probs, q.probs)
