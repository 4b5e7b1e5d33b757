"""``tensorplay_jax.nn.init``: in-place initialisers drawing from ``tp.manual_seed``'s state.

Each sets ``tensor.data`` under ``no_grad`` and returns the tensor, as in tensorplay.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from tensorplay_jax.tensors import Tensor, next_key

__all__ = [
    "calculate_gain",
    "constant_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "uniform_",
    "xavier_uniform_",
    "zeros_",
]


def _fans(t: Tensor) -> tuple[int, int]:
    if t.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with samples of U(a, b).

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.nn.init.uniform_(tp.zeros(3), -1.0, 1.0)
        >>> bool((w.abs() <= 1).all())
        True
    """
    tensor.data = jax.random.uniform(next_key(), tensor.shape, tensor.dtype, a, b)
    return tensor


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with samples of N(mean, std^2)."""
    tensor.data = mean + std * jax.random.normal(next_key(), tensor.shape, tensor.dtype)
    return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    tensor.data = jnp.full(tensor.shape, val, tensor.dtype)
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1.0)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (tensorplay's table)."""
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (He et al., 2015)."""
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def _reset_affine(weight: Tensor, bias: Tensor | None, fan_in: int) -> None:
    """torch's default for ``Linear`` and ``Conv*``: Kaiming-uniform weight, U(-b, b) bias.

    ``b = 1/sqrt(fan_in)`` (0 when ``fan_in`` is 0); the layers' ``reset_parameters``
    call this, so the rule is written once.
    """
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)
