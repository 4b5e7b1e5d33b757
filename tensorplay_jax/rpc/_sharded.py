"""Sharded ``jax.Array``s on the wire: one buffer per distinct shard, rebuilt over the peer's mesh.

An array whose ``NamedSharding`` spans several devices is encoded by
:func:`sharded_record`: the record holds its dtype and global shape, its mesh
(shape, axis names, axis types and the *receiver's* device for each mesh
position, from the device maps: ``Placement.mesh``), its ``PartitionSpec``,
and one ``[index, buffer]`` pair per distinct shard. Each shard's bytes are
their own out-of-band buffer (a view of the shard's host memory, no copy on a
CPU device); replicas of a shard (``replica_id > 0``) are not sent, so a
replicated array sends one copy. Nothing is gathered.

:func:`rebuild` makes the same sharding over the receiver's devices and puts
each shard's bytes on every device whose index they are, all in one transfer
(``runtime.device.put_shards``: on a CPU device an aligned received buffer is
aliased, not copied). :func:`rebuild_plain` gives the same array by public
API (``jax.device_put`` of each shard, joined by
``jax.make_array_from_single_device_arrays``): the path the fast one is
checked against. What a record holds that depends only on the sharding and
the shape is made once per sharding and shape, on both sides.

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

from tensorplay_jax.runtime.device import device_name, put_shards, put_shards_plain
from tensorplay_jax.runtime.shards import check_addressable, is_sharded
from tensorplay_jax.runtime.shards import index_key as _index_key

__all__ = [
    "is_sharded",
    "rebuild",
    "rebuild_packed",
    "rebuild_plain",
    "sharded_body",
    "sharded_record",
]

_CACHE_LIMIT = 256
_meshes: dict[tuple[Any, ...], Mesh] = {}
# What depends only on a sharding and a shape, made once: see _layout_out and rebuild_packed.
_layouts_out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_bodies: dict[tuple[Any, ...], tuple[bytes, list[int], jax.Device]] = {}  # see sharded_body
_plans: dict[bytes, tuple[Any, ...]] = {}  # see rebuild_packed


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
    flat, meta, spec, kept = _layout(x, s)
    dests = place.mesh(flat) if place is not None else [device_name(d) for d in flat]
    pieces, dtype = [], None
    _start_host_copies(x, flat[0])
    for i, index in kept:
        # A CPU shard's host view is its own memory (no copy).
        dtype, b = host_buffer(np.asarray(x.addressable_data(i)), buffers)
        pieces.append([index, b])
    return [
        dtype.name if dtype is not None else np.dtype(x.dtype).name,
        list(x.shape),
        *meta,
        dests,
        spec,
        pieces,
    ]


def sharded_body(
    x: jax.Array,
    place: Any,
    buffers: list[memoryview],
    host_buffer: Callable[[np.ndarray, list[memoryview]], tuple[np.dtype, int]],
    pack: Callable[[Any], bytes],
) -> bytes:
    """``pack(sharded_record(x, place, buffers, host_buffer))``, the record packed once.

    The packed record depends only on the sharding, shape and dtype, the
    placement (one per peer, made at start-up) and where in ``buffers`` the
    shards start: it is kept for the next array like ``x``, whose shards are
    then only appended to ``buffers``.
    """
    key = (x.sharding, x.shape, x.dtype, place, len(buffers))
    kept = _bodies.get(key)
    if kept is None:
        body = pack(sharded_record(x, place, buffers, host_buffer))
        flat, _, _, positions = _layout(x, x.sharding)
        return _remember(_bodies, key, (body, [i for i, _ in positions], flat[0]))[0]
    body, positions, device = kept
    _start_host_copies(x, device)
    for i in positions:
        host_buffer(np.asarray(x.addressable_data(i)), buffers)
    return body


def _start_host_copies(x: jax.Array, device: jax.Device) -> None:
    """Start every shard's device-to-host copy before the shards are read one by one.

    On an accelerator the copies then run at once, one per device, instead of
    one after the other. A CPU shard is read in place (``np.asarray`` is a
    view), so nothing is started there: a copy would only cost.
    """
    if device.platform != "cpu":  # one of x's devices: a mesh has one platform
        x.copy_to_host_async()


def _layout(x: jax.Array, s: NamedSharding) -> tuple[Any, ...]:
    layout = _layouts_out.get((s, x.shape))
    if layout is None:
        layout = _remember(_layouts_out, (s, x.shape), _layout_out(x, s))
    return layout


def _layout_out(x: jax.Array, s: NamedSharding) -> tuple[Any, ...]:
    """What the record of an array of ``x``'s sharding and shape always holds: the mesh's
    devices, ``[mesh shape, axis names, axis types]``, the spec, and (position, index) of
    each distinct shard among ``x``'s addressable data."""
    mesh = s.mesh
    meta = [list(mesh.devices.shape), list(mesh.axis_names), [t.name for t in mesh.axis_types]]
    kept = [
        (i, list(_index_key(shard.index, x.shape)))
        for i, shard in enumerate(x.addressable_shards)
        if shard.replica_id == 0
    ]
    return list(mesh.devices.flat), meta, _spec_out(s.spec), kept


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _mesh(key: tuple[Any, ...], device: Callable[[str], Any]) -> Mesh:
    mesh = _meshes.get(key)
    if mesh is None:
        names, shape, axes, types = key
        devs = np.array([device(n) for n in names], dtype=object).reshape(shape)
        kinds = tuple(jax.sharding.AxisType[t] for t in types)
        mesh = _remember(_meshes, key, Mesh(devs, axes, axis_types=kinds))
    return mesh


def _layout_in(
    rec: list[Any], device: Callable[[str], Any]
) -> tuple[NamedSharding, tuple[int, ...], list[tuple[tuple[int, ...], list[int]]]]:
    """The sharding a record asks for, the global shape, and for each of this process's
    devices in the sharding's order the index of its shard and the shard's shape."""
    _, shape, mesh_shape, axes, types, names, spec, _ = rec
    shape = tuple(shape)
    key = (tuple(names), tuple(mesh_shape), tuple(axes), tuple(types))
    sharding = NamedSharding(_mesh(key, device), _spec_in(spec))
    wanted = []
    for index in sharding.addressable_devices_indices_map(shape).values():
        k = _index_key(index, shape)
        wanted.append((k, [b - a for a, b in zip(k[::2], k[1::2], strict=True)]))
    return sharding, shape, wanted


def rebuild(
    rec: list[Any],
    buffers: list[Any],
    host_array: Callable[[str, list[int], Any], np.ndarray],
    device: Callable[[str], Any],
) -> jax.Array:
    """The array :func:`sharded_record` encoded, sharded over this process's named devices.

    Each device's shard is a host array on the received bytes (no copy),
    all put in one transfer (``put_shards``, which may alias them).

    Args:
      rec: the record.
      buffers: the message's buffers.
      host_array: ``(dtype name, shape, buffer)`` to a NumPy array on the buffer.
      device: a device name to this process's ``jax.Device``.
    """
    return put_shards(*_host_shards(_plan(rec, device), buffers, host_array))


def rebuild_packed(
    data: bytes,
    buffers: list[Any],
    host_array: Callable[[str, list[int], Any], np.ndarray],
    device: Callable[[str], Any],
    unpack: Callable[[bytes], Any],
) -> jax.Array:
    """``rebuild(unpack(data), ...)``, with what the packed record asks for read once.

    The record's bytes name everything but the shards' contents (the sharding,
    the shape, the dtype and which buffer holds which shard), and a sender
    sends the same bytes for every array of one sharding and shape
    (:func:`sharded_body`): the plan they make is kept by those bytes, so an
    array like the last one costs a dictionary lookup and its shards' views.
    """
    plan = _plans.get(data)
    if plan is None:
        plan = _remember(_plans, data, _plan(unpack(data), device))
    return put_shards(*_host_shards(plan, buffers, host_array))


def rebuild_plain(
    rec: list[Any],
    buffers: list[Any],
    host_array: Callable[[str, list[int], Any], np.ndarray],
    device: Callable[[str], Any],
) -> jax.Array:
    """What :func:`rebuild` gives, each shard put on its device by itself and the array
    joined by ``jax.make_array_from_single_device_arrays`` (the plain path it is checked
    against)."""
    return put_shards_plain(*_host_shards(_plan(rec, device), buffers, host_array))


def _plan(rec: list[Any], device: Callable[[str], Any]) -> tuple[Any, ...]:
    """What a record asks for: ``(sharding, global shape, dtype name, parts)``, ``parts``
    giving for each of this process's devices, in the sharding's order, its shard's
    shape and the buffer holding it."""
    sharding, shape, wanted = _layout_in(rec, device)
    by_index = {tuple(idx): i for idx, i in rec[7]}
    return sharding, shape, rec[0], [(piece, by_index[k]) for k, piece in wanted]


def _host_shards(
    plan: tuple[Any, ...],
    buffers: list[Any],
    host_array: Callable[[str, list[int], Any], np.ndarray],
) -> tuple[list[np.ndarray], NamedSharding, tuple[int, ...]]:
    sharding, shape, dtype, parts = plan
    return [host_array(dtype, p, buffers[i]) for p, i in parts], sharding, shape
