"""Host data (NumPy arrays, lists) into ``jax.Array`` s without compiling a program, and
back (``concrete``: the values an operation whose result size depends on them reads).

``jnp.array`` and ``jnp.asarray`` of a NumPy array compile a small program per
shape and dtype (their ``lax.stage``), which a first step or a loop over new
shapes (an episode's returns, a message's arrays) pays each time;
``runtime.device.to_device`` (``jax.device_put``, by its cached transfer) with none.

Example:
    >>> import numpy as np
    >>> from tensorplay_jax.tensors._host import from_host
    >>> from_host(np.arange(3, dtype=np.float32)).tolist()
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.device import to_device
from tensorplay_jax.runtime.x64 import check_dtype, warn_if_truncated


def from_host(
    arr: Any,
    dtype: Any = None,
    *,
    copy: bool = True,
    what: str = "tp.tensor",
    stacklevel: int = 4,
) -> jax.Array:
    """``jnp.array(arr, dtype)`` for host data (NumPy, lists, scalars), compiling nothing.

    ``jnp.array`` and ``jnp.asarray`` of a NumPy array compile a program per shape
    (their ``lax.stage``); ``jax.device_put`` (here ``runtime.device.to_device``)
    transfers with none. The dtype is
    canonicalized as JAX does (float64 is float32 unless ``jax_enable_x64``): a
    ``dtype`` of float64 then raises, and float64 data warns (see
    ``runtime.x64``), naming ``what`` and the caller ``stacklevel`` frames up.
    ``copy=False`` is for an array nobody else holds (``device_put`` may share it).
    """
    arr = np.asarray(arr)
    if dtype is not None:
        check_dtype(dtype, what)
    else:
        warn_if_truncated(arr.dtype, what, stacklevel)
    dtype = jax.dtypes.canonicalize_dtype(dtype if dtype is not None else arr.dtype)
    return to_device(np.array(arr, dtype=dtype) if copy else np.asarray(arr, dtype=dtype))


def concrete(value: Any, op: str, instead: str = "") -> np.ndarray:
    """``value`` (a Tensor's array, or any array) as a NumPy array, for an operation whose
    result's size depends on the values (``nonzero``, ``masked_select``, ``unique``, ...).

    Raises:
        TypeError: ``value`` is a JAX tracer (inside ``jax.jit``, ``jax.vmap``, ...), naming
            ``op`` and what to use there (``instead``).
    """
    if isinstance(value, jax.core.Tracer):
        hint = f"; use {instead} there" if instead else ""
        raise TypeError(
            f"{op}: the input holds a JAX tracer, and the result's size depends on the "
            f"values, so it runs outside jax.jit / jax.vmap / jax.grad{hint}"
        )
    return np.asarray(value)
