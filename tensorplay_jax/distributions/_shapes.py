"""What the distributions share: parameters as Tensors and ``sample_shape`` as a tuple."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorplay_jax.tensors import Tensor, tensor

__all__ = ["as_tensor_param", "sample_shape"]


def as_tensor_param(value: Any) -> Tensor:
    """A distribution's parameter as a Tensor (a Tensor as it is, with its graph; a Python
    number as a float32 0-d Tensor)."""
    if isinstance(value, Tensor):
        return value
    return tensor(np.asarray(value, np.float32) if isinstance(value, int | float) else value)


def sample_shape(shape: Any) -> tuple[int, ...]:
    """``sample_shape`` as a tuple of ints (an int or a sequence, as torch takes it)."""
    return (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
