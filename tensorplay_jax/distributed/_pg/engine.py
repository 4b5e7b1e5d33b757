"""The ``Engine`` protocol: what a process group's data mover offers its blocking collectives.

Each group owns one engine (``engine_shm.ShmEngine`` or ``engine_xla.XlaEngine``).
Every collective takes this rank's array (a ``jax.Array`` or a numpy array, already
validated), the normalised op or the root as a group index, and the call's
descriptor (``descriptor.encode``); it returns this rank's result as a
``jax.Array`` on this process's device. Converting to and from host memory is the
engine's own business, so the callers never branch per engine.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp

__all__ = ["Engine"]


class Engine(Protocol):
    """The collectives of one group, run by every member with the same arguments.

    Attributes:
      name: ``"shm"`` or ``"xla"``.
      ranks: the members' global ranks; ``me`` is this process's index in it.
    """

    name: str
    ranks: tuple[int, ...]
    me: int

    def close(self) -> None:
        """Release what the engine holds (segments, cached programs)."""

    def all_reduce(self, x: Any, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """The reduction of every member's ``x``."""

    def broadcast(self, x: Any, src: int, desc: np.ndarray) -> jax.Array:
        """Member ``src``'s ``x`` (``src``'s own input on ``src``)."""

    def reduce(self, x: Any, dst: int, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """The reduction on member ``dst``; zeros elsewhere."""

    def all_gather(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Every member's ``x`` stacked to ``(n, ...)``."""

    def gather(self, x: Any, dst: int, desc: np.ndarray) -> jax.Array:
        """Every member's ``x`` stacked on member ``dst``; zeros elsewhere."""

    def scatter(self, x: Any, src: int, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of member ``src``'s ``(n, ...)`` ``x``."""

    def reduce_scatter(self, x: Any, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of the reduction of every member's ``(n, ...)`` ``x``."""

    def all_to_all(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of every member's ``(n, ...)`` ``x``, stacked."""

    def all_to_all_single(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Rows split as the descriptors say, exchanged, concatenated in member order."""
