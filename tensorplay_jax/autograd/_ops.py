"""Elementwise operators, matmul and activations, each one recorded node with a cached VJP.

Operands may be Tensors, JAX/NumPy arrays or Python scalars (scalars are traced
weakly typed, so ``x * 2.5`` does not recompile for ``x * 3.5``). Every
function here is also a Tensor method or operator.
"""

from __future__ import annotations

import builtins
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd._lift import call_op
from tensorplay_jax.autograd._tensor import Tensor

_SCALARS = (int, float, complex, bool, np.generic)
_ARRAYS = (Tensor, jax.Array, np.ndarray, *_SCALARS)


def is_operand(x: Any) -> bool:
    """Whether ``x`` can take part in an elementwise operation with a Tensor."""
    return isinstance(x, (*_ARRAYS, list, tuple))


def _operand(x: Any, fn: str) -> Any:
    if isinstance(x, _ARRAYS):
        return x
    if isinstance(x, list | tuple):
        return np.asarray(x)
    raise TypeError(
        f"tp.{fn}: unsupported operand of type {type(x).__name__}; expected a Tensor, an "
        "array or a Python scalar"
    )


def _binary(fn: Any, name: str, a: Any, b: Any) -> Tensor:
    return call_op(fn, name, (_operand(a, name), _operand(b, name)))


def _unary(fn: Any, name: str, x: Any) -> Tensor:
    return call_op(fn, name, (_operand(x, name),))


# ------------------------------------------------------------------ arithmetic
def add(input: Any, other: Any, *, alpha: Any = None) -> Tensor:
    """Elementwise ``input + alpha * other`` with broadcasting.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.add(tp.tensor([1.0, 2.0]), 1)
        tensor([2., 3.])
    """
    if alpha is not None:
        other = mul(other, alpha)
    return _binary(jnp.add, "AddBackward", input, other)


def sub(input: Any, other: Any, *, alpha: Any = None) -> Tensor:
    """Elementwise ``input - alpha * other``."""
    if alpha is not None:
        other = mul(other, alpha)
    return _binary(jnp.subtract, "SubBackward", input, other)


def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product."""
    return _binary(jnp.multiply, "MulBackward", input, other)


def div(input: Any, other: Any) -> Tensor:
    """Elementwise true division (integers divide to floats)."""
    return _binary(jnp.true_divide, "DivBackward", input, other)


def floor_divide(input: Any, other: Any) -> Tensor:
    """Elementwise floor division."""
    return _binary(jnp.floor_divide, "FloorDivideBackward", input, other)


def remainder(input: Any, other: Any) -> Tensor:
    """Elementwise remainder with the sign of the divisor (Python's ``%``)."""
    return _binary(jnp.remainder, "RemainderBackward", input, other)


def pow(input: Any, exponent: Any) -> Tensor:
    """Elementwise power."""
    return _binary(jnp.power, "PowBackward", input, exponent)


def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum (ties share the gradient)."""
    return _binary(jnp.maximum, "MaximumBackward", input, other)


def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum (ties share the gradient)."""
    return _binary(jnp.minimum, "MinimumBackward", input, other)


def matmul(input: Any, other: Any) -> Tensor:
    """Matrix product with NumPy's broadcasting rules.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.matmul(tp.ones((2, 3)), tp.ones((3, 4))).shape
        (2, 4)
    """
    return _binary(jnp.matmul, "MatmulBackward", input, other)


def neg(input: Any) -> Tensor:
    """Elementwise negation."""
    return _unary(jnp.negative, "NegBackward", input)


def abs(input: Any) -> Tensor:
    """Elementwise absolute value."""
    return _unary(jnp.abs, "AbsBackward", input)


def sqrt(input: Any) -> Tensor:
    """Elementwise square root."""
    return _unary(jnp.sqrt, "SqrtBackward", input)


def square(input: Any) -> Tensor:
    """Elementwise square."""
    return _unary(jnp.square, "SquareBackward", input)


def exp(input: Any) -> Tensor:
    """Elementwise exponential.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.exp(tp.zeros(2))
        tensor([1., 1.])
    """
    return _unary(jnp.exp, "ExpBackward", input)


def log(input: Any) -> Tensor:
    """Elementwise natural logarithm."""
    return _unary(jnp.log, "LogBackward", input)


def tanh(input: Any) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return _unary(jnp.tanh, "TanhBackward", input)


def sin(input: Any) -> Tensor:
    """Elementwise sine."""
    return _unary(jnp.sin, "SinBackward", input)


def cos(input: Any) -> Tensor:
    """Elementwise cosine."""
    return _unary(jnp.cos, "CosBackward", input)


def sigmoid(input: Any) -> Tensor:
    """Elementwise logistic sigmoid ``1 / (1 + exp(-x))``."""
    return _unary(jax.nn.sigmoid, "SigmoidBackward", input)


def relu(input: Any) -> Tensor:
    """Elementwise ``max(x, 0)`` (gradient 0 at 0).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.relu(tp.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """
    return _unary(jax.nn.relu, "ReluBackward", input)


def softmax(input: Any, dim: int = -1) -> Tensor:
    """Softmax along ``dim``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.softmax(tp.zeros(2), dim=0)
        tensor([0.5, 0.5])
    """
    return call_op(jax.nn.softmax, "SoftmaxBackward", (input,), (("axis", int(dim)),))


def log_softmax(input: Any, dim: int = -1) -> Tensor:
    """Log-softmax along ``dim``, computed stably."""
    return call_op(jax.nn.log_softmax, "LogSoftmaxBackward", (input,), (("axis", int(dim)),))


def _clamp(x: jax.Array, lo: Any, hi: Any) -> jax.Array:
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return x


def clamp(input: Any, min: Any = None, max: Any = None) -> Tensor:
    """Clip values into ``[min, max]`` (either bound may be None)."""
    if min is None and max is None:
        raise ValueError("tp.clamp: at least one of min and max must be given")
    return call_op(_clamp, "ClampBackward", (input, min, max))


def where(condition: Any, input: Any, other: Any) -> Tensor:
    """Elementwise ``input if condition else other``."""
    return call_op(
        jnp.where,
        "WhereBackward",
        (_operand(condition, "where"), _operand(input, "where"), _operand(other, "where")),
    )


def astype(input: Any, dtype: Any) -> Tensor:
    """Convert to ``dtype`` (float -> float conversions are differentiable)."""
    return call_op(_astype, "ToCopyBackward", (input,), (("dtype", jnp.dtype(dtype)),))


def _astype(x: jax.Array, dtype: Any) -> jax.Array:
    return x.astype(dtype)


def _identity(x: jax.Array) -> jax.Array:
    return x


def clone(input: Any) -> Tensor:
    """A recorded copy of ``input``."""
    return call_op(_identity, "CloneBackward", (input,))


# ------------------------------------------------------------------ comparisons (no gradient)
def eq(input: Any, other: Any) -> Tensor:
    """Elementwise ``==`` (bool Tensor)."""
    return _binary(jnp.equal, "EqBackward", input, other)


def ne(input: Any, other: Any) -> Tensor:
    """Elementwise ``!=`` (bool Tensor)."""
    return _binary(jnp.not_equal, "NeBackward", input, other)


def lt(input: Any, other: Any) -> Tensor:
    """Elementwise ``<`` (bool Tensor)."""
    return _binary(jnp.less, "LtBackward", input, other)


def le(input: Any, other: Any) -> Tensor:
    """Elementwise ``<=`` (bool Tensor)."""
    return _binary(jnp.less_equal, "LeBackward", input, other)


def gt(input: Any, other: Any) -> Tensor:
    """Elementwise ``>`` (bool Tensor)."""
    return _binary(jnp.greater, "GtBackward", input, other)


def ge(input: Any, other: Any) -> Tensor:
    """Elementwise ``>=`` (bool Tensor)."""
    return _binary(jnp.greater_equal, "GeBackward", input, other)


def logical_not(input: Any) -> Tensor:
    """Elementwise logical not (``~`` on bool Tensors)."""
    return _unary(jnp.logical_not, "LogicalNotBackward", input)


def logical_and(input: Any, other: Any) -> Tensor:
    """Elementwise logical and (``&``)."""
    return _binary(jnp.logical_and, "LogicalAndBackward", input, other)


def logical_or(input: Any, other: Any) -> Tensor:
    """Elementwise logical or (``|``)."""
    return _binary(jnp.logical_or, "LogicalOrBackward", input, other)


def allclose(input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether two Tensors are elementwise equal within tolerance (no gradient)."""
    a = input.value if isinstance(input, Tensor) else input
    b = other.value if isinstance(other, Tensor) else other
    return builtins.bool(jnp.allclose(a, b, rtol=rtol, atol=atol))
