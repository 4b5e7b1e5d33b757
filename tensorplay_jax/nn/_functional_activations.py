"""The activation functions of ``nn.functional`` beyond ``relu``/``tanh``/``sigmoid``/
``softmax``: each lifts its pure JAX form (``_jax_activations``) as one tape node.

``inplace=True`` is accepted where torch takes it and computes out of place (the
result is returned; JAX arrays are immutable).
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.autograd import apply
from tensorplay_jax.nn import _jax_activations as _act
from tensorplay_jax.tensors import Tensor

__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "logsigmoid",
    "mish",
    "relu6",
    "selu",
    "silu",
    "softmin",
    "softplus",
    "softsign",
    "threshold",
]


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.leaky_relu(tp.tensor([-2.0, 3.0]), 0.1)
        tensor([-0.2,  3. ])
    """
    return apply(_act.leaky_relu, input, float(negative_slope))


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    return apply(_act.elu, input, float(alpha))


def selu(input: Any, inplace: bool = False) -> Tensor:
    """The self-normalising ELU: ``1.0507 * elu(x, 1.6733)``."""
    return apply(_act.selu, input)


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise ValueError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return apply(_act.celu, input, float(alpha))


def gelu(input: Any, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, ``Phi`` the standard normal CDF (``approximate="tanh"``: its tanh
    approximation).

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.gelu(tp.tensor([0.0, 1.0]))
        tensor([0.    , 0.8413])
    """
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    return apply(_act.gelu, input, approximate)


def silu(input: Any, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (swish)."""
    return apply(_act.silu, input)


def mish(input: Any, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return apply(_act.mish, input)


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``; ``x`` itself where ``beta * x > threshold``."""
    return apply(_act.softplus, input, float(beta), float(threshold))


def softsign(input: Any) -> Tensor:
    """``x / (1 + |x|)``."""
    return apply(_act.softsign, input)


def hardtanh(
    input: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``x`` clipped to ``[min_val, max_val]`` (no gradient at the bounds, as torch's)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return apply(_act.hardtanh, input, float(min_val), float(max_val))


def relu6(input: Any, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return apply(_act.hardtanh, input, 0.0, 6.0)


def hardswish(input: Any, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    return apply(_act.hardswish, input)


def hardsigmoid(input: Any, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``."""
    return apply(_act.hardsigmoid, input)


def logsigmoid(input: Any) -> Tensor:
    """``log(sigmoid(x))``, computed stably."""
    return apply(_act.logsigmoid, input)


def softmin(input: Any, dim: int | None = None, dtype: Any = None) -> Tensor:
    """``softmax(-x)`` along ``dim``."""
    if dim is None:
        raise TypeError("softmin: give dim (torch's implicit choice is deprecated)")
    x = input if dtype is None else input.to(dtype)
    return apply(_act.softmin, x, int(dim))


def glu(input: Any, dim: int = -1) -> Tensor:
    """The gated linear unit: ``a * sigmoid(b)`` for the two halves of ``input`` along ``dim``."""
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {n}")
    return apply(_act.glu, input, int(dim))


def threshold(input: Any, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, ``value`` elsewhere."""
    return apply(_act.threshold, input, float(threshold), float(value))
