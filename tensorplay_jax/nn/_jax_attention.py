"""Multi-head attention as pure JAX code (``nn.functional`` and ``MultiheadAttention`` lift
it with ``tp.apply``, one tape node), with torch's layout and masks."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.nn import _jax_impl

__all__ = ["multi_head_attention"]


def _additive(mask: jax.Array | None, dtype: Any) -> jax.Array | None:
    """A mask as a number to add to the scores: a boolean ``True`` is ``-inf`` (not
    attended), a float mask is added as it is."""
    if mask is None:
        return None
    if mask.dtype == jnp.bool_:
        return jnp.where(mask, -jnp.inf, 0.0).astype(dtype)
    return mask.astype(dtype)


def multi_head_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    in_proj_weight: jax.Array,
    in_proj_bias: jax.Array | None,
    out_proj_weight: jax.Array,
    out_proj_bias: jax.Array | None,
    attn_mask: jax.Array | None,
    key_padding_mask: jax.Array | None,
    rng: jax.Array | None,
    num_heads: int,
    dropout_p: float,
    need_weights: bool,
    average_attn_weights: bool,
) -> tuple[jax.Array, jax.Array | None]:
    """Attention of time-major ``query`` (L, N, E) over ``key``/``value`` (S, N, E).

    ``attn_mask`` is (L, S) or (N * num_heads, L, S), ``key_padding_mask`` (N, S); with an
    ``rng``, dropout ``dropout_p`` on the attention weights. Returns the output (L, N, E)
    and, with ``need_weights``, the weights (N, L, S) averaged over the heads, or
    (N, num_heads, L, S).
    """
    length, batch, embed = query.shape
    source = key.shape[0]
    head = embed // num_heads
    w_q, w_k, w_v = jnp.split(in_proj_weight, 3)
    b_q, b_k, b_v = (None,) * 3 if in_proj_bias is None else jnp.split(in_proj_bias, 3)

    def project(x: jax.Array, w: jax.Array, b: jax.Array | None, n: int) -> jax.Array:
        y = x @ w.T if b is None else x @ w.T + b
        return y.reshape(n, batch, num_heads, head).transpose(1, 2, 0, 3)  # (N, H, n, hd)

    q = project(query, w_q, b_q, length)
    k = project(key, w_k, b_k, source)
    v = project(value, w_v, b_v, source)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head)  # (N, H, L, S)
    mask = _additive(attn_mask, scores.dtype)
    if mask is not None:
        scores = scores + (
            mask if mask.ndim == 2 else mask.reshape(batch, num_heads, length, source)
        )
    padding = _additive(key_padding_mask, scores.dtype)
    if padding is not None:
        scores = scores + padding[:, None, None, :]
    weights = jax.nn.softmax(scores, axis=-1)
    attended = weights
    if rng is not None and dropout_p > 0:
        attended = _jax_impl.dropout(weights, rng, dropout_p)
    out = (attended @ v).transpose(2, 0, 1, 3).reshape(length, batch, embed)
    out = out @ out_proj_weight.T
    if out_proj_bias is not None:
        out = out + out_proj_bias
    if not need_weights:
        return out, None
    return out, (weights.mean(axis=1) if average_attn_weights else weights)
