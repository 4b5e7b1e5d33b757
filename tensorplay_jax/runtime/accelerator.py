"""``tp.accelerator``: torch's ``torch.accelerator`` questions, answered from ``jax.devices()``.

The accelerator is JAX's default backend when that is not the CPU (a GPU is
``"cuda"``, as torch names it, or a TPU); a CPU-only process has none.

Example:
    >>> import tensorplay_jax as tp
    >>> tp.accelerator.is_available() == (tp.accelerator.device_count() > 0)
    True
"""

from __future__ import annotations

import jax

from tensorplay_jax.runtime.device import device, present_accelerator

__all__ = ["current_accelerator", "current_device_index", "device_count", "is_available"]


def is_available() -> bool:
    """Whether this process has an accelerator (JAX's default backend is not the CPU).

    Example:
        >>> is_available() == (jax.default_backend() != "cpu")
        True
    """
    return present_accelerator() is not None


def current_accelerator(check_available: bool = False) -> device | None:
    """The accelerator's device type (``device(type='cuda')``), or None without one.

    Args:
        check_available: as torch's: return None unless an accelerator is
            present (the type is only ever reported when one is, here).

    Example:
        >>> d = current_accelerator()
        >>> d is None or d.type in ("cuda", "tpu")
        True
    """
    kind = present_accelerator()
    return None if kind is None else device(kind)


def device_count() -> int:
    """How many accelerator devices this process has (0 without an accelerator).

    Example:
        >>> device_count() == (0 if jax.default_backend() == "cpu" else jax.local_device_count())
        True
    """
    return 0 if present_accelerator() is None else jax.local_device_count()


def current_device_index() -> int:
    """The index of the accelerator device that ``"cuda"`` (no index) names: always 0 here.

    JAX places on a backend's first device unless told otherwise; there is no
    per-thread current device to set.

    Raises:
        RuntimeError: there is no accelerator.

    Example:
        >>> current_device_index() if is_available() else 0
        0
    """
    if present_accelerator() is None:
        raise RuntimeError("accelerator: no accelerator is available in this process")
    return 0
