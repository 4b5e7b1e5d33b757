"""The global random state behind ``tp.randn``/``tp.rand``/initialisation: ``manual_seed``.

One JAX PRNG key per process, split under a lock for every draw. As in torch,
a process that never calls ``manual_seed`` starts from a seed drawn from the
operating system (so two unseeded workers draw different data);
``manual_seed(s)`` makes every later draw exact. Code that runs inside a JAX
transformation supplies its own key instead (see ``key_scope``), so a traced
function never bakes in a global draw.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.runtime import xla_options

_lock = threading.Lock()
_state: dict[str, Any] = {"key": None, "seed": None}  # seed None: draw one from the OS
_scoped = threading.local()


def manual_seed(seed: int) -> None:
    """Seed the global random state (tp.randn, tp.rand, dropout, module initialisation).

    Args:
        seed: any Python int.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.manual_seed(0); a = tp.randn(3)
        >>> tp.manual_seed(0); b = tp.randn(3)
        >>> bool((a == b).all())
        True
    """
    with _lock:
        _state["seed"] = int(seed)
        _state["key"] = jax.random.key(int(seed))


def _os_seed() -> int:
    """A fresh 63-bit seed from the operating system (torch's default per process)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def initial_seed() -> int:
    """The seed of the global state: the last ``manual_seed``, else the one drawn from the OS.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.manual_seed(7)
        >>> tp.initial_seed()
        7
    """
    with _lock:
        if _state["seed"] is None:
            _state["seed"] = _os_seed()
        return _state["seed"]


@xla_options.jit
def _split(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``jax.random.split(key)`` unpacked, as one compiled call.

    An eager split and the unpacking of its result are three dispatches of JAX
    primitives, several times the cost of one cached call; the keys are the same.
    """
    new, sub = jax.random.split(key)
    return new, sub


def next_key() -> jax.Array:
    """A fresh key: from the innermost ``key_scope`` on this thread, else from the global state."""
    scope = getattr(_scoped, "stack", None)
    if scope:
        box = scope[-1]
        box[0], sub = _split(box[0])
        return sub
    with _lock:
        key = _state["key"]
        if key is None:
            if _state["seed"] is None:
                _state["seed"] = _os_seed()
            key = jax.random.key(_state["seed"])
        _state["key"], sub = _split(key)
    return sub


def in_key_scope() -> bool:
    """Whether a ``key_scope`` is active on this thread."""
    return bool(getattr(_scoped, "stack", None))


@contextlib.contextmanager
def key_scope(key: jax.Array) -> Iterator[None]:
    """Draw every random number on this thread from ``key`` (may be traced) inside the block."""
    stack = getattr(_scoped, "stack", None)
    if stack is None:
        stack = _scoped.stack = []
    stack.append([key])
    try:
        yield
    finally:
        stack.pop()


# Draws of up to this many elements are rounded up to a power of two (at most twice the
# memory, briefly), and at least ``_BUCKETED_MIN`` (small draws cost the same per call
# up to about that size, and a model's small parameters then share one program);
# larger ones are drawn at their own size.
_BUCKETED_MAX = 1 << 24
_BUCKETED_MIN = 1 << 10


@functools.partial(xla_options.jit, static_argnums=(1, 2, 3))
def _flat_draw(
    key: jax.Array, kind: str, size: int, dtype: Any, low: Any = 0.0, high: Any = 1.0
) -> jax.Array:
    if kind == "normal":
        return jax.random.normal(key, (size,), dtype)
    if kind == "integers":
        return jax.random.randint(key, (size,), low, high, dtype)
    return jax.random.uniform(key, (size,), dtype, low, high)


def flat_draw(
    kind: str, key: jax.Array, n: int, dtype: Any, low: float = 0.0, high: float = 1.0
) -> jax.Array:
    """At least ``n`` standard ``kind`` samples ("normal", "uniform" on [``low``,
    ``high``), or "integers" in [``low``, ``high``): ``jax.random.randint``'s), flat.

    ``low`` and ``high`` are arguments of the compiled draw (a new range compiles
    nothing), and the scaling is XLA's, as in ``jax.random.uniform`` itself.

    The first ``n`` are ``jax.random.normal(key, shape)`` (or ``uniform``, ``randint``) of any
    shape with ``n`` elements, read in row-major order: each element of JAX's
    (partitionable) threefry draw depends only on the key and its flat index. XLA
    compiles a one-dimensional draw several times faster than a four-dimensional
    one (a convolution's weight), and the draw is one compiled program per
    power-of-two size and dtype, so a model's many parameter shapes share a few.

    Example:
        >>> import jax, numpy as np
        >>> key = jax.random.key(0)
        >>> z = flat_draw("normal", key, 6, np.float32)
        >>> bool((z[:6].reshape(2, 3) == jax.random.normal(key, (2, 3))).all())
        True
    """
    size = _bucket(n)
    if kind == "normal":
        return _flat_draw(key, kind, size, jnp.dtype(dtype))
    return _flat_draw(key, kind, size, jnp.dtype(dtype), low, high)


def _bucket(n: int) -> int:
    """The size ``flat_draw`` draws for ``n`` samples."""
    return n if n > _BUCKETED_MAX else max(1 << max(n - 1, 0).bit_length(), _BUCKETED_MIN)


@functools.partial(xla_options.jit, static_argnums=1)
def _first(flat: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return flat[: math.prod(shape)].reshape(shape)


def integers(key: jax.Array, shape: Sequence[int], low: int, high: int, dtype: Any) -> jax.Array:
    """``jax.random.randint(key, shape, low, high, dtype)``: the same values, through
    :func:`flat_draw` (one program per power-of-two size, not one per shape: a loop
    that draws a batch of another length each step compiles nothing new).

    Example:
        >>> import jax, numpy as np
        >>> key = jax.random.key(0)
        >>> a = integers(key, (2, 5), 0, 10, np.int32)
        >>> bool((a == jax.random.randint(key, (2, 5), 0, 10, np.int32)).all())
        True
    """
    shape = tuple(shape)
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # int64 is int32 without x64
    info = jnp.iinfo(dtype)
    if not (info.min <= low <= info.max and info.min <= high <= info.max):
        # bounds the dtype cannot hold as arguments: JAX clips them at trace time
        return jax.random.randint(key, shape, low, high, dtype)
    # host scalars: they travel with the call, no transfer of their own
    bounds = np.asarray(low, dtype), np.asarray(high, dtype)
    return _first(_flat_draw(key, "integers", _bucket(math.prod(shape)), dtype, *bounds), shape)


def draw(kind: str, key: jax.Array, shape: Sequence[int], dtype: Any) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)`` (``kind="normal"``) or ``uniform`` on
    [0, 1) (``"uniform"``): the same values, through :func:`flat_draw`."""
    shape = tuple(shape)
    return _first(flat_draw(kind, key, math.prod(shape), dtype), shape)
