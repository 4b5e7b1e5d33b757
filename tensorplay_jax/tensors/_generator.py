"""``tp.Generator``: a random state of its own, for draws that must not touch the global one.

A Generator holds one JAX PRNG key and splits it under a lock for every draw,
exactly as the global state (``manual_seed``, ``_random``) does, so
``Generator().manual_seed(s)`` draws the same numbers as ``tp.manual_seed(s)``
would, and neither disturbs the other. Factories and in-place fills take it as
``generator=`` (``randn``, ``rand``, ``randint``, ``randperm``, ``normal_``,
``uniform_``, ``nn.init.normal_``/``uniform_``).

Example:
    >>> import tensorplay_jax as tp
    >>> g = tp.Generator().manual_seed(0)
    >>> a = tp.randn(3, generator=g)
    >>> _ = tp.randn(3)  # the global state moves; g does not
    >>> b = tp.randn(3, generator=g.manual_seed(0))
    >>> bool((a == b).all())
    True
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.device import device as _device
from tensorplay_jax.tensors import _random
from tensorplay_jax.tensors._tensor import Tensor

DEFAULT_SEED = 67280421310721  # torch's seed of a new Generator


class Generator:
    """A random state of its own (torch's ``torch.Generator``).

    Args:
        device: where its draws go, as ``tp.device`` takes it (the state itself
            is a JAX key; its draws follow the factory's ``device=``).
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.device = _device(device)
        self._lock = threading.Lock()
        self._seed = DEFAULT_SEED
        self._key: jax.Array | None = None  # made on first draw (no JAX work at construction)

    def manual_seed(self, seed: int) -> Generator:
        """Seed this Generator; returns it (so ``Generator().manual_seed(0)`` chains)."""
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
            raise TypeError(
                f"Generator.manual_seed: seed must be an int, got {type(seed).__name__}"
            )
        with self._lock:
            self._seed = int(seed)
            self._key = None
        return self

    def seed(self) -> int:
        """Seed this Generator from the operating system; returns the seed."""
        s = _random._os_seed()
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed of this Generator (the last ``manual_seed``/``seed``, else torch's default)."""
        return self._seed

    def get_state(self) -> Tensor:
        """The current state as a uint8 Tensor (the JAX key's data; not torch's layout)."""
        with self._lock:
            data = np.asarray(jax.random.key_data(self._current()))
        return Tensor(np.frombuffer(data.tobytes(), np.uint8).copy())

    def set_state(self, new_state: Tensor) -> Generator:
        """Restore a state from ``get_state``; returns this Generator.

        Raises:
            TypeError: ``new_state`` is not a uint8 Tensor of this key's size.
        """
        like = np.asarray(jax.random.key_data(jax.random.key(0)))
        arr = np.asarray(new_state.value if isinstance(new_state, Tensor) else new_state)
        if arr.dtype != np.uint8 or arr.size != like.nbytes:
            raise TypeError(
                f"Generator.set_state: expected a uint8 Tensor of {like.nbytes} elements (from "
                f"get_state()), got dtype {arr.dtype} with {arr.size} elements"
            )
        data = np.frombuffer(arr.tobytes(), like.dtype).reshape(like.shape)
        with self._lock:
            self._key = jax.random.wrap_key_data(data)
        return self

    def _current(self) -> jax.Array:
        if self._key is None:
            self._key = jax.random.key(self._seed)
        return self._key

    def next_key(self) -> jax.Array:
        """A fresh key for one draw (the state moves on)."""
        with self._lock:
            self._key, sub = _random._split(self._current())
        return sub

    def __repr__(self) -> str:
        return f"<tensorplay_jax.Generator device={self.device} initial_seed={self._seed}>"


def key_for(generator: Generator | None, fn: str) -> jax.Array:
    """The key for one draw of ``fn``: from ``generator``, else the global state."""
    if generator is None:
        return _random.next_key()
    if not isinstance(generator, Generator):
        raise TypeError(
            f"{fn}: generator must be a tp.Generator, got {type(generator).__name__}; make one "
            "with tp.Generator().manual_seed(seed)"
        )
    return generator.next_key()
