"""Double precision: the switch that turns it on, and the error when it is asked for without it.

tensorplay computes in float64 when asked (``dtype=tp.float64``, ``.double()``,
a float64 NumPy array). JAX holds 64-bit types only with its ``jax_enable_x64``
option on, and otherwise truncates them to 32 bits. That option is the switch
here too, for the whole process: ``JAX_ENABLE_X64=1`` in the environment (every
worker a launcher starts inherits it), or
``jax.config.update("jax_enable_x64", True)`` at start-up, before any array is
made. The package never turns it on itself, since it changes every JAX program
in the process. Without it:

- asking for float64 or complex128 by name (a ``dtype=`` argument, ``.double()``,
  ``.to(tp.float64)``) raises :class:`Float64DisabledError`, naming the switch;
- float64 data that asks for nothing (a float64 NumPy array given to ``tp.tensor``
  or ``tp.from_numpy``) becomes float32, as JAX makes it, with a
  :class:`Float64TruncatedWarning` naming the switch (shown once per call site).

Example:
    >>> import numpy as np
    >>> x64_enabled()
    False
    >>> check_dtype(np.float32, "tp.ones")
    >>> check_dtype(np.float64, "tp.ones")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensorplay_jax.runtime.x64.Float64DisabledError: tp.ones: dtype=float64 needs ...
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from tensorplay_jax.runtime.settings import X64_ENV

__all__ = [
    "Float64DisabledError",
    "Float64TruncatedWarning",
    "check_dtype",
    "warn_if_truncated",
    "x64_enabled",
]

_WIDE = frozenset({np.dtype(np.float64), np.dtype(np.complex128)})
_SWITCH = (
    f"set {X64_ENV}=1 in the environment before the process starts, or call "
    'jax.config.update("jax_enable_x64", True) before making any array'
)


class Float64DisabledError(TypeError):
    """float64 (or complex128) was asked for while JAX's 64-bit mode is off."""


class Float64TruncatedWarning(UserWarning):
    """float64 data became float32 because JAX's 64-bit mode is off."""


def x64_enabled() -> bool:
    """Whether JAX holds 64-bit types in this process now (``jax_enable_x64``)."""
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def check_dtype(dtype: Any, what: str) -> None:
    """Raise :class:`Float64DisabledError` if ``dtype`` is 64-bit floating and the mode is off.

    Args:
        dtype: the dtype asked for (None: nothing asked).
        what: the function asked, for the message (``"tp.ones"``).
    """
    if dtype is None:
        return
    dt = np.dtype(dtype)
    if dt in _WIDE and not x64_enabled():
        raise Float64DisabledError(
            f"{what}: dtype={dt} needs JAX's 64-bit mode, which is off in this process (JAX "
            f"would compute in {np.dtype(jax.dtypes.canonicalize_dtype(dt))}): {_SWITCH}; "
            "or ask for float32"
        )


def warn_if_truncated(dtype: Any, what: str, stacklevel: int = 3) -> None:
    """Warn (:class:`Float64TruncatedWarning`) that data of ``dtype`` becomes 32-bit, if it does."""
    if np.dtype(dtype) in _WIDE and not x64_enabled():
        warnings.warn(
            f"{what}: float64 data becomes float32: JAX's 64-bit mode is off in this process. "
            f"For float64, {_SWITCH}; to keep float32 and silence this, convert the data "
            "first (e.g. np.asarray(data, np.float32)) or pass dtype=tp.float32",
            Float64TruncatedWarning,
            stacklevel=stacklevel,
        )
