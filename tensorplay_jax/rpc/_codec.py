"""The RPC wire format: msgpack values, arrays as out-of-band buffers, and the type registry.

This module is the only one that imports msgpack. A value is encoded into an
:class:`Encoded`: one msgpack *header* plus a list of raw *buffers*. Arrays
(numpy and JAX, every dtype JAX knows including bfloat16, int4 and float8, 0-d
and non-contiguous) appear in the header as an extension record holding dtype,
shape and the index of their buffer; the buffer itself is a memoryview of the
array's memory, so encoding copies no array data (a non-contiguous view is
made contiguous once). Decoding rebuilds arrays on top of the received buffers.
Given a ``place`` (the agent's device maps, ``_device_maps``), a JAX array's
record also names the receiver's device it goes to, and decoding puts it there.
A JAX array sharded over several devices goes shard by shard, each distinct
shard its own buffer, and arrives with the same sharding over the receiver's
mapped devices (``_sharded``).

Built in: None, bool, int (any size), float, complex, str, bytes (bytearray and
memoryview arrive as bytes), list, tuple, dict, set, frozenset, namedtuples,
dataclasses, numpy scalars,
classes and functions. Functions and classes travel by reference (module +
qualname) when the receiver can import them, else by value with cloudpickle;
those of the main script go by name when the receiver runs the same script
(``encode(..., main=True)``, see ``_objref``). Anything else falls back to
cloudpickle. Pickled records are only ever decoded
after the transport has authenticated the peer (see ``_grpc``).

Other packages teach it their types with :func:`register_type` (see ``_wire_types``).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import cloudpickle
import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from tensorplay_jax.rpc import _objref, _sharded, _wire_types
from tensorplay_jax.rpc._exceptions import exception_record, rebuild_exception
from tensorplay_jax.rpc._wire_types import DecodeError, current_peer, register_type
from tensorplay_jax.runtime.device import resolve_device, to_device

__all__ = [
    "DecodeError",
    "Encoded",
    "current_peer",
    "decode",
    "dumps_small",
    "encode",
    "exception_record",
    "loads_small",
    "rebuild_exception",
    "register_type",
]

# Extension type codes (stable on the wire).
_EXT_ARRAY = 1
_EXT_TUPLE = 2
_EXT_COMPLEX = 3
_EXT_BIGINT = 4
_EXT_SET = 5
_EXT_FROZENSET = 6
_EXT_NAMEDTUPLE = 7
_EXT_DATACLASS = 8
_EXT_OBJREF = 9  # a class or function (by reference or by value)
_EXT_REGISTERED = 10
_EXT_PICKLE = 11
_EXT_REGISTERED_ARRAY = 12  # [name, array kind, dtype, shape, buffer index, extra]
_EXT_SHARDED = 13  # a multi-device jax.Array, one buffer per distinct shard (``_sharded``)

# Array kinds inside an _EXT_ARRAY record.
_NUMPY, _JAX, _NUMPY_SCALAR = 0, 1, 2


class Encoded(NamedTuple):
    """An encoded value: the msgpack header and the raw buffers it refers to."""

    header: bytes
    buffers: list[memoryview]

    @property
    def nbytes(self) -> int:
        return len(self.header) + sum(b.nbytes for b in self.buffers)


# ---------------------------------------------------------------------------
# Encoding


# Per-call encoding costs add up on the small-call latency path: the records below
# that depend only on a type, a dtype or a shape are made once and reused.
_CACHE_LIMIT = 4096
_array_bodies: dict[tuple[Any, ...], bytes] = {}
_objref_exts: dict[Any, msgpack.ExtType] = {}
_main_exts: dict[Any, msgpack.ExtType] = {}  # by name, for a same-script receiver


def _ext_type(code: int, data: bytes) -> msgpack.ExtType:
    """``msgpack.ExtType(code, data)`` without its argument checks (ours are always valid)."""
    return tuple.__new__(msgpack.ExtType, (code, data))


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _host_buffer(arr: np.ndarray, buffers: list[memoryview]) -> tuple[np.dtype, int]:
    """Append ``arr``'s bytes to ``buffers`` (made native and contiguous if need be).

    Returns the dtype and the buffer index; raises TypeError for object and
    structured dtypes (the caller pickles those).
    """
    dt = arr.dtype
    if dt.hasobject or dt.fields is not None:
        raise TypeError
    if not dt.isnative:
        arr = arr.astype(dt.newbyteorder("="))
        dt = arr.dtype
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    buffers.append(memoryview(arr.reshape(-1).view(np.uint8)))
    return dt, len(buffers) - 1


def _array_record(
    arr: np.ndarray, kind: int, buffers: list[memoryview], dest: str | None = None
) -> msgpack.ExtType:
    """``[kind, dtype, shape, index]``, and the receiver's device when one is named."""
    dt, index = _host_buffer(arr, buffers)
    key = (kind, dt, arr.shape, index, dest)
    body = _array_bodies.get(key)
    if body is None:
        rec = [kind, dt.name, list(arr.shape), index]
        body = msgpack.packb(rec if dest is None else [*rec, dest])
        _remember(_array_bodies, key, body)
    return _ext_type(_EXT_ARRAY, body)


def _registered_array_record(
    name: str, arr: Any, extra: Any, buffers: list[memoryview], default: _Hook
) -> msgpack.ExtType | None:
    """One record for an ``array=True`` registered value; None if ``arr`` cannot go this way."""
    dest = None
    if type(arr) is np.ndarray:
        kind, host = _NUMPY, arr
    elif isinstance(arr, jax.Array) and not isinstance(arr, jax.core.Tracer):
        if _sharded.is_sharded(arr):
            return None  # the generic record: its array goes as an _EXT_SHARDED record
        dest = default.place(arr) if default.place is not None else None
        kind, host = _JAX, np.asarray(arr)
    else:
        return None
    n = len(buffers)
    try:
        dt, index = _host_buffer(host, buffers)
    except TypeError:
        return None
    key = (name, kind, dt, host.shape, index, extra, dest)
    try:
        body = _array_bodies.get(key)
    except TypeError:  # unhashable extra
        body, key = None, None
    if body is None:
        try:
            rec = [name, kind, dt.name, list(host.shape), index, extra]
            body = msgpack.packb(rec if dest is None else [*rec, dest])
        except TypeError:  # extra is not plain msgpack
            del buffers[n:]
            return None
        if key is not None:
            _remember(_array_bodies, key, body)
    return _ext_type(_EXT_REGISTERED_ARRAY, body)


def encode(obj: Any, *, main: bool = False, place: Any = None, to: str | None = None) -> Encoded:
    """Encode ``obj`` into a msgpack header plus out-of-band array buffers.

    Args:
      obj: any value (see the module docstring for what travels how).
      main: the receiver runs this process's main script: the script's functions and
        classes go by name (else by value).
      place: ``place(jax_array)``: the receiver's device name for that array (None: its
        default device); it raises for an array that may not go (see ``_device_maps``).
      to: the receiver's name, for the encoders that ask ``_wire_types.encoding_to`` (RRefs).

    Returns:
      The :class:`Encoded` message; its buffers alias the arrays' memory.

    Example:
      >>> import numpy as np
      >>> e = encode({"x": np.arange(3, dtype=np.int32), "k": (1, "a")})
      >>> [b.nbytes for b in e.buffers]
      [12]
    """
    buffers: list[memoryview] = []
    token = _wire_types.destination.set(to)
    try:
        header = msgpack.packb(
            obj, default=_Hook(_default, buffers, main, place), strict_types=True, use_bin_type=True
        )
    finally:
        _wire_types.destination.reset(token)
    return Encoded(header, buffers)


class _Hook:
    """msgpack's ``default`` / ``ext_hook`` bound to one message's buffers (and destination).

    (A closure that passed itself on would be a reference cycle, keeping the
    message's arrays alive until the garbage collector runs.)
    """

    __slots__ = ("buffers", "fn", "main", "place")

    def __init__(
        self,
        fn: Callable[..., Any],
        buffers: list[Any],
        main: bool = False,
        place: Callable[[Any], Any] | None = None,
    ) -> None:
        self.fn, self.buffers, self.main, self.place = fn, buffers, main, place

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args, self.buffers, self)


def _pack(o: Any, default: Callable[[Any], Any]) -> bytes:
    return msgpack.packb(o, default=default, strict_types=True, use_bin_type=True)


def _default(o: Any, buffers: list[memoryview], default: _Hook) -> Any:
    t = type(o)
    entry = _wire_types.lookup(t)
    if entry is not None:
        value = entry.encode(o)
        if entry.array:
            rec = _registered_array_record(entry.name, value[0], value[1], buffers, default)
            if rec is not None:
                return rec
            value = list(value)
        return msgpack.ExtType(_EXT_REGISTERED, _pack([entry.name, value], default))
    # The commonest cases first: arrays, tuples, functions by reference.
    if t is np.ndarray:
        try:
            return _array_record(o, _NUMPY, buffers)
        except TypeError:
            return msgpack.ExtType(_EXT_PICKLE, _objref.dumps(o))
    if t is tuple:
        return _ext_type(_EXT_TUPLE, _pack(list(o), default))
    if t is types.FunctionType:
        ext = _objref_exts.get(o) or (default.main and _main_exts.get(o))
        if ext:
            return ext
        ref = _objref.importable(o) or (default.main and ("__main__", _objref.main_name(o)))
        if ref and ref[1]:
            cache = _objref_exts if ref[0] != "__main__" else _main_exts
            return _remember(cache, o, _ext_type(_EXT_OBJREF, _pack(list(ref), default)))
    if isinstance(o, jax.Array):
        if isinstance(o, jax.core.Tracer):
            raise TypeError(
                f"cannot send a traced JAX value ({o.aval}) over RPC: call rpc functions outside "
                "jax.jit/jax.grad, or use the differentiable RPC of "
                "tensorplay_jax.distributed.autograd"
            )
        if _sharded.is_sharded(o):
            body = _sharded.sharded_body(o, default.place, buffers, _host_buffer, msgpack.packb)
            return _ext_type(_EXT_SHARDED, body)
        dest = default.place(o) if default.place is not None else None
        return _array_record(np.asarray(o), _JAX, buffers, dest)
    if isinstance(o, np.generic):
        try:
            return _array_record(np.asarray(o), _NUMPY_SCALAR, buffers)
        except TypeError:
            return msgpack.ExtType(_EXT_PICKLE, _objref.dumps(o))
    if t is complex:
        return msgpack.ExtType(_EXT_COMPLEX, _pack([o.real, o.imag], default))
    if t is int:
        return msgpack.ExtType(_EXT_BIGINT, str(o).encode())
    if t is set or t is frozenset:
        code = _EXT_SET if t is set else _EXT_FROZENSET
        return msgpack.ExtType(code, _pack(list(o), default))
    if isinstance(o, tuple) and hasattr(t, "_fields"):
        ref = _objref.objref(t, default.main)
        return msgpack.ExtType(_EXT_NAMEDTUPLE, _pack([ref, list(o)], default))
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        fields = {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        ref = _objref.objref(t, default.main)
        return msgpack.ExtType(_EXT_DATACLASS, _pack([ref, fields], default))
    if isinstance(o, type | types.FunctionType | types.BuiltinFunctionType) or (
        callable(o) and (_objref.importable(o) or (default.main and _objref.main_name(o)))
    ):
        return msgpack.ExtType(_EXT_OBJREF, _pack(_objref.objref(o, default.main), default))
    return msgpack.ExtType(_EXT_PICKLE, _objref.dumps(o, default.main))


# ---------------------------------------------------------------------------
# Decoding


_dtypes: dict[str, np.dtype] = {}


def _host_array(dtype_name: str, shape: list[int], buf: Any) -> np.ndarray:
    """A NumPy array on the received bytes (no copy; read-only for a small message)."""
    dtype = _dtypes.get(dtype_name)
    if dtype is None:
        dtype = _remember(_dtypes, dtype_name, jnp.dtype(dtype_name))
    return np.frombuffer(buf, dtype=np.uint8).view(dtype).reshape(shape)


_devices: dict[str, Any] = {}


def _device(name: str) -> Any:
    """This process's device ``name`` (cached)."""
    dev = _devices.get(name)
    if dev is None:
        dev = _remember(_devices, name, resolve_device(name, "rpc"))
    return dev


def _placed(arr: np.ndarray, dest: list[Any]) -> Any:
    """``arr`` on the device the sender named (``dest[0]``), or JAX's default device."""
    if not dest:
        return to_device(arr)
    return to_device(arr, _device(dest[0]))


def _array_from(rec: list[Any], buffers: list[Any]) -> Any:
    kind, dtype_name, shape, index, *dest = rec
    arr = _host_array(dtype_name, shape, buffers[index])
    if kind == _JAX:
        return _placed(arr, dest)
    if kind == _NUMPY_SCALAR:
        return arr[()]
    if not arr.flags.writeable:
        arr = arr.copy()  # small messages alias the packet; hand out a writable array
    return arr


def decode(message: Encoded | bytes, buffers: list[Any] | None = None, *, peer: Any = None) -> Any:
    """Decode what :func:`encode` produced.

    Args:
      message: an :class:`Encoded`, or the header bytes (then pass ``buffers``).
      buffers: the out-of-band buffers, in order.
      peer: the sending worker, visible to registered decoders via :func:`current_peer`.

    Returns:
      The value.

    Raises:
      DecodeError: the bytes are not a valid message.

    Example:
      >>> import numpy as np
      >>> decode(encode((1, np.float32(2.0), [3j])))
      (1, np.float32(2.0), [3j])
    """
    if isinstance(message, Encoded):
        header, buffers = message.header, message.buffers
    else:
        header, buffers = message, buffers or []

    token = _wire_types.peer.set(peer)
    try:
        return msgpack.unpackb(
            header, ext_hook=_Hook(_ext, buffers), raw=False, strict_map_key=False
        )
    except DecodeError:
        raise
    except Exception as e:
        raise DecodeError(f"malformed message ({type(e).__name__}: {e})") from e
    finally:
        _wire_types.peer.reset(token)


def _unpack(data: bytes, ext_hook: Callable[[int, bytes], Any]) -> Any:
    return msgpack.unpackb(data, ext_hook=ext_hook, raw=False, strict_map_key=False)


def _ext(code: int, data: bytes, buffers: list[Any], ext_hook: Callable[[int, bytes], Any]) -> Any:
    if code == _EXT_ARRAY:
        return _array_from(msgpack.unpackb(data), buffers)
    if code == _EXT_REGISTERED_ARRAY:
        name, _, dtype_name, shape, index, extra, *dest = msgpack.unpackb(data)
        arr = _host_array(dtype_name, shape, buffers[index])
        return _wire_types.registered(name).decode((_placed(arr, dest) if dest else arr, extra))
    if code == _EXT_SHARDED:
        return _sharded.rebuild_packed(data, buffers, _host_array, _device, msgpack.unpackb)
    if code == _EXT_TUPLE:
        return tuple(_unpack(data, ext_hook))
    if code == _EXT_REGISTERED:
        name, value = _unpack(data, ext_hook)
        entry = _wire_types.registered(name)
        if entry.array:
            value = tuple(value)
        return entry.decode(value)
    if code == _EXT_COMPLEX:
        re, im = _unpack(data, ext_hook)
        return complex(re, im)
    if code == _EXT_BIGINT:
        return int(data.decode())
    if code == _EXT_SET:
        return set(_unpack(data, ext_hook))
    if code == _EXT_FROZENSET:
        return frozenset(_unpack(data, ext_hook))
    if code == _EXT_NAMEDTUPLE:
        ref, values = _unpack(data, ext_hook)
        return _objref.load_objref(ref)(*values)
    if code == _EXT_DATACLASS:
        ref, fields = _unpack(data, ext_hook)
        cls = _objref.load_objref(ref)
        obj = cls.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj
    if code == _EXT_OBJREF:
        return _objref.load_objref(_unpack(data, ext_hook))
    if code == _EXT_PICKLE:
        return cloudpickle.loads(data)
    raise DecodeError(f"unknown extension type code {code}")


# ---------------------------------------------------------------------------
# Small control records (envelopes); exceptions travel as ``_exceptions`` records.


def dumps_small(obj: Any) -> bytes:
    """Encode a small value with no out-of-band buffers (envelopes, control records)."""
    try:  # plain msgpack values (every envelope of a call): no hooks to run
        return msgpack.packb(obj, strict_types=True, use_bin_type=True)
    except TypeError:
        pass
    enc = encode(obj)
    if enc.buffers:
        raise ValueError("dumps_small: value holds arrays; use encode()")
    return enc.header


def loads_small(data: bytes | memoryview, *, peer: Any = None) -> Any:
    """Decode what :func:`dumps_small` produced."""
    if peer is None:
        try:
            return msgpack.unpackb(data, ext_hook=_small_ext, raw=False, strict_map_key=False)
        except DecodeError:
            raise
        except Exception as e:
            raise DecodeError(f"malformed message ({type(e).__name__}: {e})") from e
    return decode(bytes(data), [], peer=peer)


def _small_ext(code: int, data: bytes) -> Any:
    return _ext(code, data, [], _small_ext)
