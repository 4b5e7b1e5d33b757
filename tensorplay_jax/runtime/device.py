"""Device placement: the package's one way to turn host arrays into ``jax.Array``.

:func:`to_device` means ``jax.device_put(x, device)`` (public API): an array
already where it is asked to be is returned as it is, and with no device the
result is uncommitted on the default device (what ``jax.device_put(x)`` gives).
``jax.device_put`` spends 25-70 us per call in Python dispatch (abstractifying,
choosing a sharding), which dominates decoding an RPC message or a 4 KiB
collective. So for a plain NumPy array of a dtype JAX keeps as it is,
:func:`to_device` caches those facts per (shape, dtype, device, x64 flag) and
calls the transfer ``jax.device_put`` itself ends in (``batched_device_put``,
~5 us). That is private JAX API, used here and nowhere else: if it is missing
or fails once, every later call takes ``jax.device_put`` itself.

:func:`aligned_empty` makes host buffers ``HOST_ALIGN``-byte aligned, so that
placing them may alias the buffer instead of copying it.

Example:
    >>> import numpy as np
    >>> to_device(np.arange(3, dtype=np.float32)).tolist()
    [0.0, 1.0, 2.0]
    >>> aligned_empty((2, 3), np.float32).ctypes.data % HOST_ALIGN
    0
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.settings import HOST_ALIGN

__all__ = ["HOST_ALIGN", "aligned_empty", "on_device", "to_device"]

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
    return _core.ShapedArray(a.shape, dt), jax.sharding.SingleDeviceSharding(dev)


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
