"""Device placement: the package's one way to turn host arrays into ``jax.Array``.

:func:`to_device` means ``jax.device_put(x, device)`` (public API): an array already
where it is asked to be is returned as it is, and with no device the result is
uncommitted on the default device (what ``jax.device_put(x)`` gives).
``jax.device_put`` spends most of a small transfer's time in Python dispatch
(abstractifying, choosing a sharding), which dominates decoding an RPC message or a
4 KiB collective. So for a plain NumPy array of a dtype JAX keeps as it is,
:func:`to_device` caches those facts per (shape, dtype, device, x64 flag) and calls
the transfer ``jax.device_put`` itself ends in (``batched_device_put``). That is
private JAX API, used here and nowhere else: if it is missing or fails once, every
later call takes ``jax.device_put`` itself. :func:`put_shards` puts one host
array per device onto a sharding the same way (one batched transfer for all
shards; :func:`put_shards_plain` is its public-API path).

:func:`aligned_empty` makes host buffers ``HOST_ALIGN``-byte aligned, so that
placing them may alias the buffer instead of copying it.

Device names, as tensorplay code writes them (``device="cuda:1"``), have one
parser: :func:`parse_device` reads ``"kind"`` or ``"kind:index"`` (kinds in
``DEVICE_TYPES``), :func:`resolve_device` turns such a name (or a
``jax.Device``) into this process's JAX device: ``"cuda"`` and ``"gpu"`` are
JAX's gpu platform, the index counts that platform's local devices (none
given: 0). A device that is not here raises an error naming those that are.
Factories, ``Tensor.to`` and ``RemoteModule`` all go through it. :class:`device`
is torch's device object (``tp.device("cuda", 1)``), taken wherever a name is.

Example:
    >>> import numpy as np
    >>> to_device(np.arange(3, dtype=np.float32)).tolist()
    [0.0, 1.0, 2.0]
    >>> aligned_empty((2, 3), np.float32).ctypes.data % HOST_ALIGN
    0
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.settings import HOST_ALIGN

__all__ = [
    "DEVICE_TYPES",
    "HOST_ALIGN",
    "aligned_empty",
    "canonical_device",
    "device",
    "device_name",
    "local_device_names",
    "on_device",
    "parse_device",
    "present_devices",
    "put_shards",
    "put_shards_plain",
    "resolve_device",
    "to_device",
]

try:  # the fast path's private calls; without them every call is jax.device_put
    from jax._src import core as _core
    from jax._src import dtypes as _dtypes
    from jax._src.interpreters import pxla as _pxla
    from jax._src.lib import xla_client as _xc

    _fast = hasattr(_xc, "batched_device_put") and hasattr(_pxla, "get_default_device")
except ImportError:  # pragma: no cover - a JAX without them
    _fast = False

_CACHE_LIMIT = 512
_specs: dict[tuple[Any, ...], Any] = {}
_sharded_specs: dict[tuple[Any, ...], Any] = {}


def to_device(x: Any, device: Any = None) -> jax.Array:
    """``x`` as a ``jax.Array``: ``jax.device_put(x, device)``, or ``x`` when it is there already.

    Args:
      x: a NumPy array, a ``jax.Array`` or anything ``jax.device_put`` takes.
      device: a ``jax.Device`` (the result is committed to it), or None for an
        uncommitted array on the default device.

    Example:
        >>> import jax, numpy as np
        >>> dev = jax.devices()[0]
        >>> y = to_device(np.ones(2, np.float32), dev)
        >>> y.committed, to_device(y, dev) is y
        (True, True)
    """
    if isinstance(x, jax.Array) and (device is None or (x.committed and x.devices() == {device})):
        return x
    if _fast and type(x) is np.ndarray:
        y = _put(x, device)
        if y is not None:
            return y
    return jax.device_put(x, device)


def _put(a: np.ndarray, device: Any) -> jax.Array | None:
    """``jax.device_put(a, device)`` by the cached transfer; None: take the public path."""
    global _fast
    try:
        dev = _pxla.get_default_device() if device is None else device
        key = (a.shape, a.dtype, dev, jax.config.jax_enable_x64)
        spec = _specs.get(key)
        if spec is None:
            spec = _spec(a, dev)
            if len(_specs) >= _CACHE_LIMIT:
                _specs.clear()
            _specs[key] = spec
        if spec is False:
            return None
        aval, sharding = spec
        return _xc.batched_device_put(aval, sharding, [a], [dev], device is not None)
    except Exception:  # an incompatible jaxlib: the public path from now on
        _fast = False
        return None


def _spec(a: np.ndarray, dev: Any) -> Any:
    dt = a.dtype
    if dt.hasobject or dt == _dtypes.float0 or _dtypes.canonicalize_dtype(dt) != dt:
        return False
    return _core.ShapedArray(a.shape, dt), jax.sharding.make_single_device_sharding(dev)


def put_shards(
    hosts: Sequence[Any], sharding: jax.sharding.Sharding, shape: Sequence[int]
) -> jax.Array:
    """The array of ``shape`` on ``sharding`` whose shard on each device is a host array.

    ``hosts[i]`` is the shard of the i-th device of
    ``sharding.addressable_devices_indices_map(shape)``. For NumPy arrays of a
    dtype JAX keeps as it is, one transfer puts them all (``batched_device_put``,
    where ``jax.device_put`` of a host array onto a sharding ends: an aligned
    host array may be aliased, not copied, on a CPU device); anything else,
    or a JAX without that call, takes :func:`put_shards_plain`, which gives
    the same array.

    Example:
        >>> import jax, numpy as np
        >>> n = min(2, len(jax.devices()))
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
        >>> s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
        >>> parts = np.split(np.arange(4.0, dtype=np.float32), n)
        >>> put_shards(parts, s, (4,)).tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    if _fast and hosts and all(type(h) is np.ndarray for h in hosts):
        y = _put_sharded(hosts, sharding, tuple(shape))
        if y is not None:
            return y
    return put_shards_plain(hosts, sharding, shape)


def put_shards_plain(
    hosts: Sequence[Any], sharding: jax.sharding.Sharding, shape: Sequence[int]
) -> jax.Array:
    """What :func:`put_shards` gives, by public API: each shard by :func:`to_device`, joined by
    ``jax.make_array_from_single_device_arrays``."""
    devices = sharding.addressable_devices_indices_map(tuple(shape))
    arrays = [to_device(h, d) for h, d in zip(hosts, devices, strict=True)]
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, arrays)


def _put_sharded(hosts: Sequence[np.ndarray], sharding: Any, shape: tuple[int, ...]) -> Any:
    """``put_shards`` by the cached batched transfer; None: take the plain path."""
    global _fast
    try:
        dt = hosts[0].dtype
        key = (sharding, shape, dt, jax.config.jax_enable_x64)
        spec = _sharded_specs.get(key)
        if spec is None:
            spec = _sharded_spec(sharding, shape, dt)
            if len(_sharded_specs) >= _CACHE_LIMIT:
                _sharded_specs.clear()
            _sharded_specs[key] = spec
        if spec is False:
            return None
        aval, devices, shapes = spec
        if len(hosts) != len(shapes) or any(
            h.dtype != dt or h.shape != s for h, s in zip(hosts, shapes, strict=False)
        ):
            return None  # the plain path says what is wrong
        return _xc.batched_device_put(aval, sharding, list(hosts), devices, True)
    except Exception:  # an incompatible jaxlib: the public path from now on
        _fast = False
        return None


def _sharded_spec(sharding: Any, shape: tuple[int, ...], dt: np.dtype) -> Any:
    if dt.hasobject or dt == _dtypes.float0 or _dtypes.canonicalize_dtype(dt) != dt:
        return False
    indices = sharding.addressable_devices_indices_map(shape)
    devices = list(indices)
    # The transfer takes the shards in the sharding's device order (as jax.device_put
    # gives them); a sharding that orders them otherwise takes the plain path.
    if devices != list(getattr(sharding, "_addressable_device_assignment", ())):
        return False
    shapes = [tuple(len(range(*sl.indices(n))) for sl, n in zip(i, shape, strict=True))
              for i in indices.values()]  # fmt: skip
    return _core.ShapedArray(shape, dt), devices, shapes


def on_device(x: Any) -> Any:
    """``x`` with a host NumPy array moved by :func:`to_device`; anything else as it is.

    Example:
        >>> import numpy as np
        >>> type(on_device(np.zeros(1))).__name__ in ("Array", "ArrayImpl"), on_device(3)
        (True, 3)
    """
    return to_device(x) if type(x) is np.ndarray else x


def aligned_empty(shape: tuple[int, ...], dtype: Any, *, zero: bool = False) -> np.ndarray:
    """A fresh C-contiguous array whose data is ``HOST_ALIGN``-byte aligned (zeros if ``zero``).

    ``jax.device_put`` of such a host array may alias it instead of copying.

    Example:
        >>> import numpy as np
        >>> a = aligned_empty((4,), np.int32, zero=True)
        >>> a.tolist(), a.ctypes.data % HOST_ALIGN
        ([0, 0, 0, 0], 0)
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + HOST_ALIGN, np.uint8)
    off = (-raw.ctypes.data) % HOST_ALIGN
    return raw[off : off + nbytes].view(dtype).reshape(shape)


# ---------------------------------------------------------------- device names

DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda", "gpu", "tpu")
_PLATFORM = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "tpu": "tpu"}
_DEVICE_RE = re.compile(r"^([a-z]+)(?::(\d+))?$")


def parse_device(spec: str, what: str = "device") -> tuple[str, int | None]:
    """``"cuda:1"`` -> ``("cuda", 1)``; ``"cpu"`` -> ``("cpu", None)``.

    Raises:
      ValueError: not ``kind`` or ``kind:index`` with a kind of ``DEVICE_TYPES``.

    Example:
        >>> parse_device("cuda:1"), parse_device("tpu")
        (('cuda', 1), ('tpu', None))
    """
    m = _DEVICE_RE.match(spec) if isinstance(spec, str) else None
    if m is None or m.group(1) not in DEVICE_TYPES:
        raise ValueError(
            f"{what}: unknown device type {spec!r}; expected one of "
            f"{', '.join(DEVICE_TYPES)}, optionally with ':index' (e.g. 'cuda:0')"
        )
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def _local(platform: str) -> list[Any]:
    try:
        return list(jax.local_devices(backend=platform))
    except RuntimeError:  # no such backend in this JAX
        return []


def device_name(device: Any) -> str:
    """The name :func:`resolve_device` takes for a JAX device, e.g. ``"cpu:1"``.

    Example:
        >>> import jax
        >>> device_name(jax.local_devices(backend="cpu")[0])
        'cpu:0'
    """
    label = {"cpu": "cpu", "tpu": "tpu"}.get(device.platform, "cuda")  # gpu: cuda or rocm
    local = _local(_PLATFORM[label])
    index = local.index(device) if device in local else device.id
    return f"{label}:{index}"


def present_devices() -> str:
    """This process's local devices by the names :func:`resolve_device` takes.

    Example:
        >>> present_devices().startswith("cpu:0")
        True
    """
    names = []
    for platform, label in (("cpu", "cpu"), ("gpu", "cuda"), ("tpu", "tpu")):
        n = len(_local(platform))
        if n == 1:
            names.append(f"{label}:0")
        elif n == 2:
            names.append(f"{label}:0, {label}:1")
        elif n > 2:
            names.append(f"{label}:0..{label}:{n - 1}")
    return ", ".join(names) or "none"


def local_device_names() -> list[str]:
    """Every local device of this process by its canonical name (CPU first).

    Example:
        >>> local_device_names()[0]
        'cpu:0'
    """
    names = []
    for platform, label in (("cpu", "cpu"), ("gpu", "cuda"), ("tpu", "tpu")):
        names += [f"{label}:{i}" for i in range(len(_local(platform)))]
    return names


def canonical_device(spec: Any, what: str = "device") -> str:
    """The canonical name of a device, here or on another worker: ``"cuda:1"``, ``"cpu:0"``.

    Takes a name (``"gpu:1"`` and ``"cuda:1"`` are the same device; no index
    means 0), a :class:`device`, a ``jax.Device`` (one of this process's) or an
    int (the accelerator's device of that index, as ``device(1)``). The device
    need not be present: device maps name the devices of other workers.

    Raises:
      ValueError: an unknown device name.
      TypeError: none of the above.

    Example:
        >>> canonical_device("gpu:1"), canonical_device("cpu"), canonical_device(device("cuda", 2))
        ('cuda:1', 'cpu:0', 'cuda:2')
    """
    if isinstance(spec, jax.Device):
        return device_name(spec)
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = device(spec)
    if isinstance(spec, device):
        kind, index = spec.type, spec.index
    elif isinstance(spec, str):
        kind, index = parse_device(spec, what)
    else:
        raise TypeError(
            f"{what}: device={spec!r} must be a string like 'cuda:0', an int, a tp.device or "
            "a jax.Device"
        )
    return f"{'cuda' if kind == 'gpu' else kind}:{index or 0}"


def resolve_device(device: Any, what: str = "device") -> Any:
    """The local JAX device that ``device`` names (None stays None: JAX's default).

    Args:
      device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"gpu"``, ``"tpu"``,
        ``"cpu:1"``, a :class:`device`, an int (the accelerator's device of that
        index), a ``jax.Device``, or None.
      what: the caller, for errors (``"tp.randn"``).

    Raises:
      ValueError: an unknown device name.
      TypeError: neither a string, a ``jax.Device`` nor None.
      RuntimeError: the device is not present in this process; the message names those that are.

    Example:
        >>> import jax
        >>> resolve_device("cpu") == jax.local_devices(backend="cpu")[0]
        True
        >>> resolve_device(None) is None
        True
    """
    if device is None or isinstance(device, jax.Device):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        device = _device_class(device)
    if isinstance(device, _device_class):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(
            f"{what}: device={device!r} must be a string like 'cpu' or 'cuda:0', a jax.Device "
            "or None"
        )
    kind, index = parse_device(device, what)
    local = _local(_PLATFORM[kind])
    i = 0 if index is None else index
    if i >= len(local):
        raise RuntimeError(
            f"{what}: device {device!r} is not available here; devices: {present_devices()}"
        )
    return local[i]


class device:  # lower case: torch's spelling, tp.device("cuda:0"), isinstance(d, tp.device)
    """A device by type and index, as torch's ``torch.device``; taken wherever a name is.

    ``device("cuda:1")``, ``device("cuda", 1)``, ``device("cpu")`` (no index),
    ``device(0)`` (the accelerator's device 0), or ``device(other)``. It names
    a device and checks the name, not whether that device is present: the
    factories, ``Tensor.to`` and ``Module.to`` resolve it as they resolve
    ``"cuda:1"``.

    Raises:
        ValueError: an unknown type, or an index given twice.
        RuntimeError: ``device(int)`` where there is no accelerator.

    Example:
        >>> d = device("cuda", 1)
        >>> d, str(d), d.type, d.index
        (device(type='cuda', index=1), 'cuda:1', 'cuda', 1)
        >>> device("cpu") == device("cpu"), device("cpu") == device("cpu", 0)
        (True, False)
    """

    __slots__ = ("_index", "_type")

    def __init__(self, type: Any, index: int | None = None) -> None:
        if isinstance(type, device):
            kind, idx = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            accelerator = present_accelerator()
            if accelerator is None:
                raise RuntimeError(
                    "device: cannot access accelerator device when none is available"
                )
            kind, idx = accelerator, type
        else:
            kind, idx = parse_device(type, "device")
        if index is not None:
            if idx is not None:
                raise ValueError(f"device: type {type!r} has an index already; index={index}")
            if index < 0:
                raise ValueError(f"device: index={index} must be >= 0")
            idx = int(index)
        self._type, self._index = kind, idx

    @property
    def type(self) -> str:
        """The device type: ``"cpu"``, ``"cuda"``, ``"gpu"`` or ``"tpu"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device's index among its type's local devices, or None (the current one)."""
        return self._index

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        index = "" if self._index is None else f", index={self._index}"
        return f"device(type={self._type!r}{index})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, device):
            return NotImplemented
        return (self._type, self._index) == (other._type, other._index)

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __reduce__(self) -> tuple[Any, tuple[str, int | None]]:
        return device, (self._type, self._index)


_device_class = device  # for resolve_device, whose argument is named ``device``


def present_accelerator() -> str | None:
    """The device type of JAX's default backend when it is not the CPU, else None.

    Example:
        >>> present_accelerator() in (None, "cuda", "tpu")
        True
    """
    platform = jax.default_backend()
    if platform == "cpu":
        return None
    return "tpu" if platform == "tpu" else "cuda"
