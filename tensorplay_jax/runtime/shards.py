"""A sharded ``jax.Array`` by its shards: what moves an array between processes without a gather.

:func:`is_sharded` tells an array over several devices; :func:`index_key` names
a shard by where it sits in the global array; :class:`HostShards` holds the
distinct shards of one on the host (views, no copy on a CPU device) and puts
them on a sharding again, each device given its shard's bytes;
:func:`check_addressable` refuses an array with shards in other processes.
The RPC layer encodes sharded arrays with these (``rpc/_sharded``), and
distributed autograd sends sharded gradients back as :class:`HostShards`.

Example:
    >>> import jax
    >>> is_sharded(jax.numpy.ones(2))
    False
    >>> index_key((slice(0, 2), slice(None)), (4, 3))
    (0, 2, 0, 3)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.device import put_shards

__all__ = ["HostShards", "check_addressable", "index_key", "is_sharded"]


_single: list[type] = []  # the type of a one-device sharding, read from the first one made


def is_sharded(x: jax.Array) -> bool:
    """True for an array over several devices."""
    s = x.sharding
    if not _single:  # (``jax.sharding.SingleDeviceSharding`` by name is deprecated in JAX 0.12)
        _single.append(type(jax.sharding.make_single_device_sharding(next(iter(s.device_set)))))
    return type(s) is not _single[0] and len(s.device_set) > 1


def index_key(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shard's index into an array of ``shape`` as ``(start0, stop0, start1, stop1, ...)``."""
    out: list[int] = []
    for sl, n in zip(index, shape, strict=True):
        start, stop, _ = sl.indices(n)
        out += (start, stop)
    return tuple(out)


def check_addressable(x: jax.Array, what: str) -> None:
    """Raise ValueError, saying what to send instead, if some of ``x``'s shards are elsewhere."""
    if x.is_fully_addressable:
        return
    s = x.sharding
    raise ValueError(
        f"{what}: cannot send an array whose shards are not all in this process ({s}, over "
        f"{len(s.device_set)} devices, {len(x.addressable_shards)} of them here: a "
        "multi-controller array); send this process's shards ([s.data for s in "
        "x.addressable_shards]), or a host copy of this process's part "
        "(jax.experimental.multihost_utils.global_array_to_host_local_array)"
    )


class HostShards:
    """A sharded array's distinct shards as host arrays, by index: a gradient on its way back.

    Distributed autograd sends a sharded gradient this way (registered with
    the codec as ``tensorplay_jax.HostShards``: each shard its own buffer, no
    device map needed, nothing gathered); the worker it reaches puts it on
    the sharding of the value that went forward (:meth:`on`).

    Example:
        >>> import jax, numpy as np
        >>> n = min(2, len(jax.devices()))
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
        >>> s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
        >>> h = HostShards.of(jax.device_put(np.arange(4.0), s))
        >>> len(h.pieces) == n, h.on(s).sharding.is_equivalent_to(s, 1)
        (True, True)
    """

    __slots__ = ("dtype", "pieces", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any, pieces: dict[tuple[int, ...], Any]):
        self.shape, self.dtype, self.pieces = tuple(shape), np.dtype(dtype), pieces

    @classmethod
    def of(cls, x: jax.Array) -> HostShards:
        """The distinct shards of fully addressable ``x`` (host views: no copy on a CPU device)."""
        check_addressable(x, "distributed autograd")
        pieces = {
            index_key(s.index, x.shape): np.asarray(s.data)
            for s in x.addressable_shards
            if s.replica_id == 0
        }
        return cls(x.shape, x.dtype, pieces)

    def on(self, sharding: jax.sharding.Sharding) -> jax.Array:
        """The array on ``sharding``, each device given its shard's bytes.

        Where ``sharding`` cuts the array differently from the shards held, it
        is assembled on the host first (a gather: the sender reshards to avoid it).
        """
        shape = self.shape
        want = sharding.addressable_devices_indices_map(shape)
        keys = {d: index_key(i, shape) for d, i in want.items()}
        if not all(k in self.pieces for k in keys.values()):
            full = np.empty(shape, self.dtype)
            for k, piece in self.pieces.items():
                full[tuple(slice(a, b) for a, b in zip(k[::2], k[1::2], strict=True))] = piece
            return jax.device_put(full, sharding)
        return put_shards([np.asarray(self.pieces[k]) for k in keys.values()], sharding, shape)
