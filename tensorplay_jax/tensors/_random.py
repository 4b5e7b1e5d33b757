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
import os
import threading
from collections.abc import Iterator
from typing import Any

import jax

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


@jax.jit
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
