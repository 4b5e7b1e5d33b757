"""Losses and distances as pure JAX code, with torch's formulas (``nn.functional`` lifts
each with ``tp.apply``).

The binary cross-entropy clamps each log at -100, as torch's does, so a probability of
exactly 0 or 1 gives a finite loss; the one on logits is written in torch's stable form.
MSE, L1, NLL and cross-entropy are in ``_jax_impl``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special

from tensorplay_jax.nn._jax_impl import _reduce as reduce
from tensorplay_jax.nn._jax_impl import magnitude


def binary_cross_entropy(
    x: jax.Array, t: jax.Array, weight: jax.Array | None, reduction: str
) -> jax.Array:
    """``-(t log x + (1 - t) log(1 - x))``, each log at least -100."""
    losses = -(t * jnp.maximum(jnp.log(x), -100.0) + (1 - t) * jnp.maximum(jnp.log1p(-x), -100.0))
    return reduce(losses if weight is None else losses * weight, reduction)


def binary_cross_entropy_with_logits(
    x: jax.Array,
    t: jax.Array,
    weight: jax.Array | None,
    pos_weight: jax.Array | None,
    reduction: str,
) -> jax.Array:
    """``binary_cross_entropy(sigmoid(x), t)`` computed stably; ``pos_weight`` scales the
    positive term."""
    softplus_neg = jnp.logaddexp(0, -x)  # -log(sigmoid(x))
    if pos_weight is None:
        losses = (1 - t) * x + softplus_neg
    else:
        losses = (1 - t) * x + ((pos_weight - 1) * t + 1) * softplus_neg
    return reduce(losses if weight is None else losses * weight, reduction)


def smooth_l1_loss(x: jax.Array, t: jax.Array, reduction: str, beta: float) -> jax.Array:
    """``0.5 d^2 / beta`` where ``|d| < beta``, ``|d| - 0.5 beta`` elsewhere (``d = x - t``)."""
    d = magnitude(x - t)
    if beta == 0:
        return reduce(d, reduction)
    return reduce(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(x: jax.Array, t: jax.Array, reduction: str, delta: float) -> jax.Array:
    """``0.5 d^2`` where ``|d| < delta``, ``delta (|d| - 0.5 delta)`` elsewhere."""
    d = magnitude(x - t)
    return reduce(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def kl_div(x: jax.Array, t: jax.Array, reduction: str, log_target: bool) -> jax.Array:
    """``t (log t - x)`` pointwise (0 where ``t`` is 0); ``x`` holds log-probabilities.
    ``"batchmean"`` divides the sum by the batch size."""
    losses = jnp.exp(t) * (t - x) if log_target else jax.scipy.special.xlogy(t, t) - t * x
    if reduction == "batchmean":
        return jnp.sum(losses) / (x.shape[0] if x.ndim else 1)
    return reduce(losses, reduction)


def margin_ranking_loss(
    x1: jax.Array, x2: jax.Array, y: jax.Array, margin: float, reduction: str
) -> jax.Array:
    """``max(0, -y (x1 - x2) + margin)``."""
    return reduce(jnp.maximum(-y * (x1 - x2) + margin, 0.0), reduction)


def cosine_similarity(x1: jax.Array, x2: jax.Array, dim: int, eps: float) -> jax.Array:
    """``x1 . x2 / max(|x1| |x2|, eps)`` along ``dim`` (inputs broadcast)."""
    x1, x2 = jnp.broadcast_arrays(x1, x2)
    n1 = jnp.sum(x1 * x1, axis=dim)
    n2 = jnp.sum(x2 * x2, axis=dim)
    return jnp.sum(x1 * x2, axis=dim) / jnp.sqrt(jnp.maximum(n1 * n2, eps * eps))


def _p_norm(x: jax.Array, p: float, axis: int, keepdims: bool) -> jax.Array:
    """``|x|_p`` along ``axis``, with gradient 0 (not NaN) at a zero vector, as torch's."""
    s = jnp.sum(magnitude(x) ** p, axis=axis, keepdims=keepdims)
    nonzero = s > 0
    return jnp.where(nonzero, jnp.where(nonzero, s, 1.0) ** (1 / p), 0.0)


def pairwise_distance(
    x1: jax.Array, x2: jax.Array, p: float, eps: float, keepdim: bool
) -> jax.Array:
    """``|x1 - x2 + eps|_p`` along the last dimension."""
    return _p_norm(x1 - x2 + eps, p, -1, keepdim)


def normalize(x: jax.Array, p: float, dim: int, eps: float) -> jax.Array:
    """``x / max(|x|_p, eps)`` along ``dim``."""
    return x / jnp.maximum(_p_norm(x, p, dim, True), eps)
