"""``tp.cuda``: torch's ``torch.cuda.is_available()`` and ``device_count()``, from JAX's GPUs.

A GPU is JAX's ``gpu`` platform (CUDA or ROCm), the ``"cuda"`` device type of
``tp.device`` and ``Tensor.to``.

Example:
    >>> import tensorplay_jax as tp
    >>> tp.cuda.is_available() == (tp.cuda.device_count() > 0)
    True
"""

from __future__ import annotations

import jax

__all__ = ["device_count", "is_available"]


def device_count() -> int:
    """How many GPUs this process sees (0 where JAX has no GPU backend).

    Example:
        >>> device_count() >= 0
        True
    """
    try:
        return len(jax.local_devices(backend="gpu"))
    except RuntimeError:  # no GPU backend in this JAX
        return 0


def is_available() -> bool:
    """Whether this process has a GPU.

    Example:
        >>> is_available() == (device_count() > 0)
        True
    """
    return device_count() > 0
