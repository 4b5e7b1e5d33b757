"""Elementwise operators, matmul and activations, each one recorded node with a cached VJP.

Operands may be Tensors, JAX/NumPy arrays or Python scalars (scalars are traced
weakly typed, so ``x * 2.5`` does not recompile for ``x * 3.5``). Every
function here is also a Tensor method or operator. A plain elementwise
operation is written as its signature and docstring under ``@_unary_op``/
``@_binary_op(jax_function, node_name)``, which supply the one body they share.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors._tensor import Tensor

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


def _unary_op(jfn: Any, node: str) -> Callable[[Callable[..., Tensor]], Callable[..., Tensor]]:
    """Give the docstring-only ``stub(input)`` its body: ``jfn`` recorded as one node ``node``."""

    def define(stub: Callable[..., Tensor]) -> Callable[..., Tensor]:
        @functools.wraps(stub)
        def op(input: Any) -> Tensor:
            return _unary(jfn, node, input)

        return op

    return define


def _binary_op(jfn: Any, node: str) -> Callable[[Callable[..., Tensor]], Callable[..., Tensor]]:
    """Give the docstring-only ``stub(input, other)`` its body: ``jfn`` recorded as one node."""

    def define(stub: Callable[..., Tensor]) -> Callable[..., Tensor]:
        @functools.wraps(stub)
        def op(input: Any, other: Any) -> Tensor:
            return _binary(jfn, node, input, other)

        return op

    return define


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


@_binary_op(jnp.multiply, "MulBackward")
def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product."""


@_binary_op(jnp.true_divide, "DivBackward")
def div(input: Any, other: Any) -> Tensor:
    """Elementwise true division (integers divide to floats)."""


@_binary_op(jnp.floor_divide, "FloorDivideBackward")
def floor_divide(input: Any, other: Any) -> Tensor:
    """Elementwise floor division."""


@_binary_op(jnp.remainder, "RemainderBackward")
def remainder(input: Any, other: Any) -> Tensor:
    """Elementwise remainder with the sign of the divisor (Python's ``%``)."""


def pow(input: Any, exponent: Any) -> Tensor:
    """Elementwise power."""
    return _binary(jnp.power, "PowBackward", input, exponent)


@_binary_op(jnp.maximum, "MaximumBackward")
def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum (ties share the gradient)."""


@_binary_op(jnp.minimum, "MinimumBackward")
def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum (ties share the gradient)."""


@_binary_op(jnp.matmul, "MatmulBackward")
def matmul(input: Any, other: Any) -> Tensor:
    """Matrix product with NumPy's broadcasting rules.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.matmul(tp.ones((2, 3)), tp.ones((3, 4))).shape
        (2, 4)
    """


@_unary_op(jnp.negative, "NegBackward")
def neg(input: Any) -> Tensor:
    """Elementwise negation."""


@_unary_op(jnp.abs, "AbsBackward")
def abs(input: Any) -> Tensor:
    """Elementwise absolute value."""


@_unary_op(jnp.sqrt, "SqrtBackward")
def sqrt(input: Any) -> Tensor:
    """Elementwise square root."""


@_unary_op(jnp.square, "SquareBackward")
def square(input: Any) -> Tensor:
    """Elementwise square."""


@_unary_op(jnp.exp, "ExpBackward")
def exp(input: Any) -> Tensor:
    """Elementwise exponential.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.exp(tp.zeros(2))
        tensor([1., 1.])
    """


@_unary_op(jnp.log, "LogBackward")
def log(input: Any) -> Tensor:
    """Elementwise natural logarithm."""


@_unary_op(jnp.tanh, "TanhBackward")
def tanh(input: Any) -> Tensor:
    """Elementwise hyperbolic tangent."""


@_unary_op(jnp.sin, "SinBackward")
def sin(input: Any) -> Tensor:
    """Elementwise sine."""


@_unary_op(jnp.cos, "CosBackward")
def cos(input: Any) -> Tensor:
    """Elementwise cosine."""


@_unary_op(jax.nn.sigmoid, "SigmoidBackward")
def sigmoid(input: Any) -> Tensor:
    """Elementwise logistic sigmoid ``1 / (1 + exp(-x))``."""


@_unary_op(jax.nn.relu, "ReluBackward")
def relu(input: Any) -> Tensor:
    """Elementwise ``max(x, 0)`` (gradient 0 at 0).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.relu(tp.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """


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
@_binary_op(jnp.equal, "EqBackward")
def eq(input: Any, other: Any) -> Tensor:
    """Elementwise ``==`` (bool Tensor)."""


@_binary_op(jnp.not_equal, "NeBackward")
def ne(input: Any, other: Any) -> Tensor:
    """Elementwise ``!=`` (bool Tensor)."""


@_binary_op(jnp.less, "LtBackward")
def lt(input: Any, other: Any) -> Tensor:
    """Elementwise ``<`` (bool Tensor)."""


@_binary_op(jnp.less_equal, "LeBackward")
def le(input: Any, other: Any) -> Tensor:
    """Elementwise ``<=`` (bool Tensor)."""


@_binary_op(jnp.greater, "GtBackward")
def gt(input: Any, other: Any) -> Tensor:
    """Elementwise ``>`` (bool Tensor)."""


@_binary_op(jnp.greater_equal, "GeBackward")
def ge(input: Any, other: Any) -> Tensor:
    """Elementwise ``>=`` (bool Tensor)."""


@_unary_op(jnp.logical_not, "LogicalNotBackward")
def logical_not(input: Any) -> Tensor:
    """Elementwise logical not (``~`` on bool Tensors)."""


@_binary_op(jnp.logical_and, "LogicalAndBackward")
def logical_and(input: Any, other: Any) -> Tensor:
    """Elementwise logical and (``&``)."""


@_binary_op(jnp.logical_or, "LogicalOrBackward")
def logical_or(input: Any, other: Any) -> Tensor:
    """Elementwise logical or (``|``)."""


def allclose(input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether two Tensors are elementwise equal within tolerance (no gradient)."""
    a = input.value if isinstance(input, Tensor) else input
    b = other.value if isinstance(other, Tensor) else other
    return builtins.bool(jnp.allclose(a, b, rtol=rtol, atol=atol))
