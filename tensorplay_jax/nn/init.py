"""``tensorplay_jax.nn.init``: torch's initialisers, in place, drawing from ``tp.manual_seed``.

Each writes ``tensor`` in place under ``no_grad`` (so a parameter that requires
grad may be initialised, and views of it see the new value) and returns it.
Fan modes and gains follow torch: for a weight of shape ``(out, in, *k)``,
``fan_in = in * prod(k)`` and ``fan_out = out * prod(k)``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import no_grad
from tensorplay_jax.tensors import Generator, Tensor, next_key

__all__ = [
    "calculate_gain",
    "constant_",
    "dirac_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]


def _write(tensor: Tensor, value: Any) -> Tensor:
    with no_grad():
        return tensor.copy_(value)


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight shaped ``(out, in, *kernel)``, as torch computes them."""
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (torch's table).

    Example:
        >>> import tensorplay_jax as tp
        >>> round(tp.nn.init.calculate_gain("leaky_relu", 0.2), 4)
        1.3868
    """
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d")
    if nonlinearity in (*linear, "conv_transpose3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, bool) or not isinstance(param, int | float):
            raise ValueError(f"negative_slope {param} not a valid number")
        else:
            slope = param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(
    tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of U(a, b).

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.nn.init.uniform_(tp.zeros(3), -1.0, 1.0)
        >>> bool((w.abs() <= 1).all())
        True
    """
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of N(mean, std^2) (from ``generator`` when given)."""
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0
) -> Tensor:
    """Fill with N(mean, std^2) samples truncated to ``[a, b]`` (absolute bounds, as torch's).

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.nn.init.trunc_normal_(tp.zeros(100), std=1.0, a=-0.5, b=0.5)
        >>> bool((w.abs() <= 0.5).all())
        True
    """
    lo, hi = (a - mean) / std, (b - mean) / std
    z = jax.random.truncated_normal(next_key(), lo, hi, tensor.shape, jnp.float32)
    return _write(tensor, jnp.clip(mean + std * z, a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-d Tensor with the identity (ones on the diagonal, also when not square).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.init.eye_(tp.zeros(2, 3))
        tensor([[1., 0., 0.],
                [0., 1., 0.]])
    """
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, jnp.eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-d convolution weight with the Dirac delta (identity convolution)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per_group = tensor.shape[0] // groups
    channels = min(out_per_group, tensor.shape[1])
    value = jnp.zeros(tensor.shape, tensor.dtype)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(channels):
            value = value.at[(g * out_per_group + d, d, *centre)].set(1)
    return _write(tensor, value)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (He et al., 2015).

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.nn.init.kaiming_uniform_(tp.zeros(64, 100), nonlinearity="relu")
        >>> bool((w.abs() <= (2 ** 0.5) * (3 / 100) ** 0.5).all())
        True
    """
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """N(0, std^2) with ``std = gain / sqrt(fan)`` (He et al., 2015)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std)


def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """A (semi-)orthogonal matrix from the QR of a Gaussian one, times ``gain`` (Saxe et al.).

    A Tensor with more than 2 dimensions is treated as ``(shape[0], prod(rest))``.

    Example:
        >>> import numpy as np
        >>> import tensorplay_jax as tp
        >>> q = tp.nn.init.orthogonal_(tp.zeros(3, 5)).numpy()
        >>> bool(np.allclose(q @ q.T, np.eye(3), atol=1e-5))
        True
    """
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    flat = jax.random.normal(next_key(), (rows, cols), jnp.float32)
    if rows < cols:
        flat = flat.T
    q, r = jnp.linalg.qr(flat)
    q = q * jnp.sign(jnp.diagonal(r))
    if rows < cols:
        q = q.T
    return _write(tensor, gain * q.reshape(tensor.shape))


def _reset_affine(weight: Tensor, bias: Tensor | None, fan_in: int) -> None:
    """torch's default for ``Linear`` and ``Conv*``: Kaiming-uniform weight, U(-b, b) bias.

    ``b = 1/sqrt(fan_in)`` (0 when ``fan_in`` is 0); the layers' ``reset_parameters``
    call this, so the rule is written once.
    """
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)
