"""Several arrays as one flat buffer and back: what DDP's buckets, ZeRO's per-rank
broadcasts and model averaging send in one collective instead of one per array.

Example:
  >>> import jax.numpy as jnp
  >>> a, b = jnp.ones((2, 2)), jnp.arange(3.0)
  >>> buf = flatten([a, b], jnp.float32)
  >>> buf.shape
  (7,)
  >>> [x.shape for x in split(buf, [(2, 2), (3,)])]
  [(2, 2), (3,)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["flatten", "split"]


def flatten(arrays: Sequence[Any], dtype: Any) -> jax.Array:
    """``arrays`` raveled, in ``dtype``, one after another (the array itself when alone,
    an empty array for none)."""
    parts = [jnp.ravel(a).astype(dtype) for a in arrays]
    if not parts:
        return jnp.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


def split(flat: Any, shapes: Sequence[tuple[int, ...]]) -> list[jax.Array]:
    """``flat`` back into one array per shape, in order (what :func:`flatten` laid out)."""
    flat, out, start = jnp.asarray(flat), [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(flat[start : start + n].reshape(shape))
        start += n
    return out
