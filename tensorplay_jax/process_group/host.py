"""What engines that move data in host memory share: the jax.Array boundary, chunking, buffers.

A host-side engine (``shm``, ``tcp``) runs its collectives in numpy on
C-contiguous host arrays: :func:`on_host` wraps each collective so that it takes
a host view of the input (no copy for a CPU array) and hands back a ``jax.Array``
on this rank's device. Results go into 64-byte aligned buffers
(``runtime.device.aligned_empty``), which ``jax.device_put`` takes without a
copy. A new host-side engine builds on these helpers rather than on another
engine's private ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp, reduce_into
from tensorplay_jax.runtime.device import aligned_empty, to_device

__all__ = ["bounds", "copied", "on_host", "raw", "reduced", "stacked"]


def on_host(method: Callable[..., np.ndarray | None]) -> Callable[..., jax.Array]:
    """Run an engine's numpy collective on a C-contiguous host view of ``x``.

    The wrapped method's ``self`` has a ``device``; its host result comes back as a
    ``jax.Array`` on that device, aliasing the (aligned) host buffer. A method that
    returns ``None`` (a broadcast's src) means ``x`` itself. An engine that offers
    its collectives on host arrays to another engine does so by a public method
    (``ShmEngine.reduce_scatter_host``), not through ``__wrapped__``.

    Example:
      >>> class Twice:
      ...     device = jax.devices("cpu")[0]
      ...     @on_host
      ...     def all_reduce(self, x):
      ...         return x * 2
      >>> Twice().all_reduce(jax.numpy.arange(3))
      Array([0, 2, 4], dtype=int32)
    """

    @functools.wraps(method)
    def run(self: Any, x: Any, *args: Any) -> jax.Array:
        y = method(self, np.asarray(x, order="C"), *args)
        if y is None:
            y = x
        return y if isinstance(y, jax.Array) else to_device(np.asarray(y), self.device)

    return run


def bounds(total: int, n: int) -> list[tuple[int, int]]:
    """Split ``total`` elements into ``n`` contiguous chunks (sizes differ by at most one).

    Example:
      >>> bounds(7, 3)
      [(0, 3), (3, 5), (5, 7)]
    """
    q, r = divmod(total, n)
    out, start = [], 0
    for i in range(n):
        stop = start + q + (1 if i < r else 0)
        out.append((start, stop))
        start = stop
    return out


def reduced(parts: Sequence[np.ndarray], op: ReduceOp) -> np.ndarray:
    """The reduction of equally shaped ``parts`` (one per member) in a new aligned buffer.

    Example:
      >>> reduced([np.arange(3.0), np.ones(3)], ReduceOp.AVG)
      array([0.5, 1. , 1.5])
    """
    out = aligned_empty(parts[0].shape, parts[0].dtype)
    reduce_into(out.reshape(-1), [p.reshape(-1) for p in parts], op, len(parts))
    return out


def stacked(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Equally shaped ``parts`` stacked to ``(len(parts), ...)`` in a new aligned buffer.

    Example:
      >>> stacked([np.zeros(2), np.ones(2)])
      array([[0., 0.],
             [1., 1.]])
    """
    out = aligned_empty((len(parts), *parts[0].shape), parts[0].dtype)
    for j, p in enumerate(parts):
        out[j] = p
    return out


def copied(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` in a new aligned buffer (for a result that must outlive a shared slot).

    Example:
      >>> copied(np.arange(3))
      array([0, 1, 2])
    """
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def raw(a: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, for ``send`` / ``recv_into`` (no copy).

    Example:
      >>> raw(np.ones(2, np.int16)).nbytes
      4
    """
    return memoryview(a.reshape(-1).view(np.uint8))
