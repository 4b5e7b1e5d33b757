"""Sharded ``jax.Array``s on the wire: one buffer per distinct shard, rebuilt over the peer's mesh.

An array whose ``NamedSharding`` spans several devices is encoded by
:func:`sharded_record`: the record holds its dtype and global shape, its mesh
(shape, axis names, axis types and the *receiver's* device for each mesh
position, from the device maps: ``Placement.mesh``), its ``PartitionSpec``,
and one ``[index, buffer]`` pair per distinct shard. Each shard's bytes are
their own out-of-band buffer (a view of the shard's host memory, no copy on a
CPU device); replicas of a shard (``replica_id > 0``) are not sent, so a
replicated array sends one copy. Nothing is gathered.

:func:`rebuild` makes the same sharding over the receiver's devices, puts each
shard's bytes on every device whose index they are (``jax.device_put`` of the
received buffer, which may alias it), and joins them with
``jax.make_array_from_single_device_arrays``.

Refused, with what to send instead: an array whose shards are not all in this
process (``is_fully_addressable`` false: a multi-controller array), and a
multi-device array whose sharding is not a ``NamedSharding``.

Example:
    >>> import jax, numpy as np
    >>> n = min(2, len(jax.devices()))
    >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
    >>> spec = jax.sharding.PartitionSpec("x")
    >>> x = jax.device_put(np.arange(4.0), jax.sharding.NamedSharding(mesh, spec))
    >>> from tensorplay_jax.rpc import _codec
    >>> message = _codec.encode(x)
    >>> len(message.buffers) == n
    True
    >>> y = _codec.decode(message)
    >>> y.sharding.is_equivalent_to(x.sharding, x.ndim), np.asarray(y).tolist()
    (True, [0.0, 1.0, 2.0, 3.0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tensorplay_jax.runtime.device import device_name, to_device
from tensorplay_jax.runtime.shards import check_addressable, is_sharded
from tensorplay_jax.runtime.shards import index_key as _index_key

__all__ = ["is_sharded", "rebuild", "sharded_record"]

_CACHE_LIMIT = 256
_meshes: dict[tuple[Any, ...], Mesh] = {}


def _spec_out(spec: PartitionSpec) -> list[Any]:
    if spec.unreduced or spec.reduced:
        raise ValueError(
            f"rpc: cannot send an array whose PartitionSpec {spec} has unreduced or reduced "
            "axes; reduce it first (e.g. jax.lax.psum inside the function that made it)"
        )
    return [list(p) if isinstance(p, tuple) else p for p in spec]


def _spec_in(parts: list[Any]) -> PartitionSpec:
    return PartitionSpec(*(tuple(p) if isinstance(p, list) else p for p in parts))


def _check(x: jax.Array) -> NamedSharding:
    s = x.sharding
    check_addressable(x, "rpc")
    if not isinstance(s, NamedSharding):
        raise ValueError(
            f"rpc: cannot send an array sharded over {len(s.device_set)} devices by "
            f"{type(s).__name__}; give it a NamedSharding (jax.device_put(x, "
            "NamedSharding(mesh, spec))), or send a host copy (jax.device_get)"
        )
    return s


def sharded_record(
    x: jax.Array,
    place: Any,
    buffers: list[memoryview],
    host_buffer: Callable[[np.ndarray, list[memoryview]], tuple[np.dtype, int]],
) -> list[Any]:
    """The wire record of sharded ``x``; appends each distinct shard's bytes to ``buffers``.

    Args:
      x: a fully addressable array with a multi-device ``NamedSharding``.
      place: the device maps' ``Placement`` for the receiver (None: device names kept).
      buffers: the message's out-of-band buffers.
      host_buffer: appends a host array's bytes, returns (dtype, buffer index).

    Returns:
      ``[dtype, shape, mesh shape, axis names, axis types, devices, spec, pieces]``.

    Raises:
      ValueError: the array cannot go (see the module docstring), or the maps lack a device.
    """
    s = _check(x)
    mesh = s.mesh
    flat = list(mesh.devices.flat)
    dests = place.mesh(flat) if place is not None else [device_name(d) for d in flat]
    pieces, dtype = [], None
    for shard in x.addressable_shards:
        if shard.replica_id != 0:
            continue
        dt, index = host_buffer(np.asarray(shard.data), buffers)
        dtype = dt
        pieces.append([list(_index_key(shard.index, x.shape)), index])
    return [
        dtype.name if dtype is not None else np.dtype(x.dtype).name,
        list(x.shape),
        list(mesh.devices.shape),
        list(mesh.axis_names),
        [t.name for t in mesh.axis_types],
        dests,
        _spec_out(s.spec),
        pieces,
    ]


def _mesh(key: tuple[Any, ...], device: Callable[[str], Any]) -> Mesh:
    mesh = _meshes.get(key)
    if mesh is None:
        names, shape, axes, types = key
        devs = np.array([device(n) for n in names], dtype=object).reshape(shape)
        kinds = tuple(jax.sharding.AxisType[t] for t in types)
        mesh = Mesh(devs, axes, axis_types=kinds)
        if len(_meshes) >= _CACHE_LIMIT:
            _meshes.clear()
        _meshes[key] = mesh
    return mesh


def rebuild(
    rec: list[Any],
    buffers: list[Any],
    host_array: Callable[[str, list[int], Any], np.ndarray],
    device: Callable[[str], Any],
) -> jax.Array:
    """The array :func:`sharded_record` encoded, sharded over this process's named devices.

    Args:
      rec: the record.
      buffers: the message's buffers.
      host_array: ``(dtype name, shape, buffer)`` to a NumPy array on the buffer.
      device: a device name to this process's ``jax.Device``.
    """
    dtype, shape, mesh_shape, axes, types, names, spec, pieces = rec
    shape = tuple(shape)
    key = (tuple(names), tuple(mesh_shape), tuple(axes), tuple(types))
    sharding = NamedSharding(_mesh(key, device), _spec_in(spec))
    by_index = {tuple(idx): i for idx, i in pieces}
    arrays = []
    for dev, index in sharding.addressable_devices_indices_map(shape).items():
        k = _index_key(index, shape)
        host = host_array(dtype, [b - a for a, b in zip(k[::2], k[1::2], strict=True)],
                          buffers[by_index[k]])  # fmt: skip
        arrays.append(to_device(host, dev))
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)
