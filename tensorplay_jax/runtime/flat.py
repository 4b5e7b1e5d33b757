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

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["flatten", "split"]


@functools.partial(jax.jit, static_argnames=("dtype",))
def _flatten(arrays: list[Any], dtype: Any) -> jax.Array:
    return jnp.concatenate([jnp.ravel(a).astype(dtype) for a in arrays])


@functools.partial(jax.jit, static_argnames=("shapes",))
def _split(flat: jax.Array, shapes: tuple[tuple[int, ...], ...]) -> list[jax.Array]:
    out, start = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(flat[start : start + n].reshape(shape))
        start += n
    return out


def flatten(arrays: Sequence[Any], dtype: Any) -> jax.Array:
    """``arrays`` raveled, in ``dtype``, one after another (an empty array for none).

    One compiled program per list of shapes (JAX's cache): eagerly, each ravel, cast and
    the concatenation would be an operation of its own.
    """
    if not arrays:
        return jnp.zeros(0, dtype)
    return _flatten(list(arrays), dtype=jnp.dtype(dtype))


def split(flat: Any, shapes: Sequence[tuple[int, ...]]) -> list[jax.Array]:
    """``flat`` back into one array per shape, in order (what :func:`flatten` laid out),
    in one compiled program."""
    return _split(jnp.asarray(flat), tuple(tuple(int(d) for d in s) for s in shapes))
