"""Elementwise operators, matmul and activations, each one recorded node with a cached VJP.

Operands may be Tensors, JAX/NumPy arrays or Python scalars (scalars are traced
weakly typed, so ``x * 2.5`` does not recompile for ``x * 3.5``). Every
function here is also a Tensor method or operator. A plain elementwise
operation is one line, ``name = _unary_op(name, jax_function, docstring)`` (or
``_binary_op``), which supplies the body they share and the node name
(``floor_divide`` records ``FloorDivideBackward``); operations with more
arguments, or a docstring with an example, are written out.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.runtime.x64 import check_dtype
from tensorplay_jax.tensors import _sparse_ops
from tensorplay_jax.tensors._sparse import SparseTensor, _dense_only
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


def _binary(fn: Any, name: str, a: Any, b: Any, saves: bool = True) -> Tensor:
    if type(a) is SparseTensor or type(b) is SparseTensor:
        return _sparse_ops.binary(fn, name, a, b)
    return call_op(fn, name, (_operand(a, name), _operand(b, name)), saves=saves)


def _unary(fn: Any, name: str, x: Any, saves: bool = True) -> Tensor:
    if type(x) is SparseTensor:
        if fn is jnp.negative:
            return _sparse_ops.neg(x)
        raise TypeError(_dense_only(f"tp.{name.removesuffix('Backward').lower()}"))
    return call_op(fn, name, (_operand(x, name),), saves=saves)


def _node_name(name: str) -> str:
    """tensorplay's node name for an operation: ``floor_divide`` -> ``FloorDivideBackward``."""
    return "".join(part.capitalize() for part in name.split("_")) + "Backward"


def _unary_op(name: str, jfn: Any, doc: str) -> Callable[[Any], Tensor]:
    """The public operation ``name(input)``: ``jfn`` recorded as one node."""
    node = _node_name(name)

    def op(input: Any) -> Tensor:
        return _unary(jfn, node, input)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


def _binary_op(name: str, jfn: Any, doc: str) -> Callable[[Any, Any], Tensor]:
    """The public operation ``name(input, other)``: ``jfn`` recorded as one node."""
    node = _node_name(name)

    def op(input: Any, other: Any) -> Tensor:
        return _binary(jfn, node, input, other)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


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
    return _binary(jnp.add, "AddBackward", input, other, saves=False)


def sub(input: Any, other: Any, *, alpha: Any = None) -> Tensor:
    """Elementwise ``input - alpha * other``."""
    if alpha is not None:
        other = mul(other, alpha)
    return _binary(jnp.subtract, "SubBackward", input, other, saves=False)


mul = _binary_op("mul", jnp.multiply, "Elementwise product.")
div = _binary_op("div", jnp.true_divide, "Elementwise true division (integers divide to floats).")
floor_divide = _binary_op("floor_divide", jnp.floor_divide, "Elementwise floor division.")
remainder = _binary_op(
    "remainder",
    jnp.remainder,
    "Elementwise remainder with the sign of the divisor (Python's ``%``).",
)


def pow(input: Any, exponent: Any) -> Tensor:
    """Elementwise power."""
    return _binary(jnp.power, "PowBackward", input, exponent)


maximum = _binary_op("maximum", jnp.maximum, "Elementwise maximum (ties share the gradient).")
minimum = _binary_op("minimum", jnp.minimum, "Elementwise minimum (ties share the gradient).")


def matmul(input: Any, other: Any) -> Tensor:
    """Matrix product with NumPy's broadcasting rules.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.matmul(tp.ones((2, 3)), tp.ones((3, 4))).shape
        (2, 4)
    """
    return _binary(jnp.matmul, "MatmulBackward", input, other)


def mm(input: Any, mat2: Any) -> Tensor:
    """Product of two matrices (torch's ``mm``); a sparse ``input`` gives a dense result.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.mm(tp.ones((2, 3)), tp.ones((3, 4))).shape
        (2, 4)
    """
    if type(input) is SparseTensor:
        return _sparse_ops.mm(input, mat2)
    return _binary(jnp.matmul, "MmBackward", input, mat2)


def bmm(input: Any, mat2: Any) -> Tensor:
    """Batched matrix product of two 3-d Tensors: ``(b, n, m) @ (b, m, p) -> (b, n, p)``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.bmm(tp.ones((2, 3, 4)), tp.ones((2, 4, 5))).shape
        (2, 3, 5)
    """
    a, b = _operand(input, "bmm"), _operand(mat2, "bmm")
    for arg, x in (("batch1", a), ("batch2", b)):
        if np.ndim(x) != 3:
            raise RuntimeError(f"{arg} must be a 3D tensor (got {np.ndim(x)} dimensions)")
    want = (np.shape(a)[0], np.shape(a)[2])
    if tuple(np.shape(b)[:2]) != want:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: {list(want)} but "
            f"got: {list(np.shape(b)[:2])}."
        )
    return call_op(jnp.matmul, "BmmBackward", (a, b))


def neg(input: Any) -> Tensor:
    """Elementwise negation."""
    return _unary(jnp.negative, "NegBackward", input, saves=False)


def magnitude(x: jax.Array) -> jax.Array:
    """``|x|`` whose gradient is ``sign(x)``, 0 at 0 as torch's (``jnp.abs``'s is 1 there)."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating) or not jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.abs(x)
    return x * jnp.sign(x)


abs = _unary_op("abs", magnitude, "Elementwise absolute value (gradient 0 at 0, as torch's).")
sqrt = _unary_op("sqrt", jnp.sqrt, "Elementwise square root.")
square = _unary_op("square", jnp.square, "Elementwise square.")


def exp(input: Any) -> Tensor:
    """Elementwise exponential.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.exp(tp.zeros(2))
        tensor([1., 1.])
    """
    return _unary(jnp.exp, "ExpBackward", input)


log = _unary_op("log", jnp.log, "Elementwise natural logarithm.")
tanh = _unary_op("tanh", jnp.tanh, "Elementwise hyperbolic tangent.")
sin = _unary_op("sin", jnp.sin, "Elementwise sine.")
cos = _unary_op("cos", jnp.cos, "Elementwise cosine.")
sigmoid = _unary_op(
    "sigmoid", jax.nn.sigmoid, "Elementwise logistic sigmoid ``1 / (1 + exp(-x))``."
)
log1p = _unary_op("log1p", jnp.log1p, "Elementwise ``log(1 + x)``, exact for small ``x``.")
expm1 = _unary_op("expm1", jnp.expm1, "Elementwise ``exp(x) - 1``, exact for small ``x``.")
log2 = _unary_op("log2", jnp.log2, "Elementwise base-2 logarithm.")
log10 = _unary_op("log10", jnp.log10, "Elementwise base-10 logarithm.")
sinh = _unary_op("sinh", jnp.sinh, "Elementwise hyperbolic sine.")
cosh = _unary_op("cosh", jnp.cosh, "Elementwise hyperbolic cosine.")
asin = _unary_op("asin", jnp.arcsin, "Elementwise arcsine.")
acos = _unary_op("acos", jnp.arccos, "Elementwise arccosine.")
atan = _unary_op("atan", jnp.arctan, "Elementwise arctangent.")
atan2 = _binary_op("atan2", jnp.arctan2, "Elementwise arctangent of ``input / other`` by quadrant.")
erf = _unary_op("erf", jax.scipy.special.erf, "Elementwise Gauss error function.")


def _float_of(x: jax.Array) -> jax.Array:
    """``x`` as a float array: integers and bools become the default float type, as torch's
    float-valued operations make them."""
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)


def _reciprocal(x: jax.Array) -> jax.Array:
    return 1 / _float_of(x)


def _rsqrt(x: jax.Array) -> jax.Array:
    return jax.lax.rsqrt(_float_of(x))


reciprocal = _unary_op("reciprocal", _reciprocal, "Elementwise ``1 / x`` (integers give floats).")
rsqrt = _unary_op("rsqrt", _rsqrt, "Elementwise ``1 / sqrt(x)``.")


# ------------------------------------------------------------------ rounding (zero gradient)
def _integral(fn: Any) -> Any:
    """``fn`` for floats; an integer or bool array is already integral and stays as it is."""

    def rounded(x: jax.Array) -> jax.Array:
        return fn(x) if jnp.issubdtype(x.dtype, jnp.inexact) else x

    return rounded


floor = _unary_op("floor", _integral(jnp.floor), "Elementwise floor (integers are kept).")
ceil = _unary_op("ceil", _integral(jnp.ceil), "Elementwise ceiling (integers are kept).")
trunc = _unary_op("trunc", _integral(jnp.trunc), "Elementwise rounding toward zero.")
frac = _unary_op(
    "frac", lambda x: x - jnp.trunc(x), "Elementwise fractional part ``x - trunc(x)``."
)


def _round(x: jax.Array, decimals: int) -> jax.Array:
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    if decimals == 0:
        return jnp.round(x)
    scale = 10.0**decimals
    return jnp.round(x * scale) / scale


def round(input: Any, *, decimals: int = 0) -> Tensor:
    """Elementwise rounding to ``decimals`` places, halves to even (torch's and NumPy's rule).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.round(tp.tensor([0.5, 1.5, 2.5, -0.5]))
        tensor([ 0.,  2.,  2., -0.])
    """
    return call_op(
        _round, "RoundBackward", (_operand(input, "round"),), (("decimals", int(decimals)),)
    )


def _sign(x: jax.Array) -> jax.Array:
    s = jnp.sign(x)
    if jnp.issubdtype(x.dtype, jnp.floating):  # torch: sign(nan) and sign(-0.0) are +0.0
        s = jnp.where(jnp.isnan(x) | (s == 0), jnp.zeros_like(s), s)
    return s


sign = _unary_op("sign", _sign, "Elementwise sign: -1, 0 or 1 (0 for NaN, as torch's).")
fmod = _binary_op(
    "fmod", jnp.fmod, "Elementwise remainder with the sign of the dividend (C's ``fmod``)."
)


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
    # min(max(x, lo), hi) with torch's gradient: 1 for x in [lo, hi], bounds included, and
    # to a Tensor bound where it applies (jnp.maximum/minimum would split a tie in half).
    out = x if lo is None else jnp.where(x < lo, lo, x)
    return out if hi is None else jnp.where(out > hi, hi, out)


def clamp(input: Any, min: Any = None, max: Any = None) -> Tensor:
    """Clip values into ``[min, max]`` (either bound may be None)."""
    if min is None and max is None:
        raise ValueError("tp.clamp: at least one of min and max must be given")
    return call_op(_clamp, "ClampBackward", (input, min, max))


clip = clamp


def _nan_to_num(x: jax.Array, nan: Any, posinf: Any, neginf: Any) -> jax.Array:
    return jnp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


def nan_to_num(input: Any, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Tensor:
    """NaN, +inf and -inf replaced (by 0 and the dtype's largest and lowest finite values,
    unless given)."""
    static = (("nan", float(nan)), ("posinf", posinf), ("neginf", neginf))
    return call_op(_nan_to_num, "NanToNumBackward", (_operand(input, "nan_to_num"),), static)


isnan = _unary_op("isnan", jnp.isnan, "Elementwise: is NaN (bool Tensor).")
isinf = _unary_op("isinf", jnp.isinf, "Elementwise: is +inf or -inf (bool Tensor).")
isfinite = _unary_op("isfinite", jnp.isfinite, "Elementwise: neither infinite nor NaN (bool).")


def _isclose(a: jax.Array, b: jax.Array, rtol: float, atol: float, equal_nan: bool) -> jax.Array:
    return jnp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def isclose(
    input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (bool Tensor)."""
    static = (("rtol", float(rtol)), ("atol", float(atol)), ("equal_nan", builtins.bool(equal_nan)))
    args = (_operand(input, "isclose"), _operand(other, "isclose"))
    return call_op(_isclose, "IscloseBackward", args, static)


def where(condition: Any, input: Any, other: Any) -> Tensor:
    """Elementwise ``input if condition else other``."""
    return call_op(
        jnp.where,
        "WhereBackward",
        (_operand(condition, "where"), _operand(input, "where"), _operand(other, "where")),
    )


def astype(input: Any, dtype: Any) -> Tensor:
    """Convert to ``dtype`` (float -> float conversions are differentiable).

    Raises:
        Float64DisabledError: ``dtype`` is float64 and JAX's 64-bit mode is off.
    """
    dt = jnp.dtype(dtype)
    check_dtype(dt, "Tensor.to")
    static = (("dtype", dt),)
    return call_op(_astype, "ToCopyBackward", (input,), static, saves=False)


def _astype(x: jax.Array, dtype: Any) -> jax.Array:
    return x.astype(dtype)


def _identity(x: jax.Array) -> jax.Array:
    return x


def clone(input: Any) -> Tensor:
    """A recorded copy of ``input``."""
    return call_op(_identity, "CloneBackward", (input,), saves=False)


# ------------------------------------------------------------------ comparisons (no gradient)
eq = _binary_op("eq", jnp.equal, "Elementwise ``==`` (bool Tensor).")
ne = _binary_op("ne", jnp.not_equal, "Elementwise ``!=`` (bool Tensor).")
lt = _binary_op("lt", jnp.less, "Elementwise ``<`` (bool Tensor).")
le = _binary_op("le", jnp.less_equal, "Elementwise ``<=`` (bool Tensor).")
gt = _binary_op("gt", jnp.greater, "Elementwise ``>`` (bool Tensor).")
ge = _binary_op("ge", jnp.greater_equal, "Elementwise ``>=`` (bool Tensor).")
logical_not = _unary_op(
    "logical_not", jnp.logical_not, "Elementwise logical not (``~`` on bool Tensors)."
)
logical_and = _binary_op("logical_and", jnp.logical_and, "Elementwise logical and (``&``).")
logical_or = _binary_op("logical_or", jnp.logical_or, "Elementwise logical or (``|``).")
logical_xor = _binary_op("logical_xor", jnp.logical_xor, "Elementwise logical exclusive or.")


def equal(input: Any, other: Any) -> bool:
    """Whether two Tensors have the same shape and the same elements (no gradient).

    Values are compared after type promotion, as torch does (``tp.ones(2)`` equals
    an int Tensor of ones).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.equal(tp.ones(2), tp.ones(2)), tp.equal(tp.ones(2), tp.ones(3))
        (True, False)
    """
    a = input.value if isinstance(input, Tensor) else jnp.asarray(input)
    b = other.value if isinstance(other, Tensor) else jnp.asarray(other)
    if a.shape != b.shape:
        return False
    return builtins.bool(np.array_equal(np.asarray(a), np.asarray(b)))


def allclose(input: Any, other: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether two Tensors are elementwise equal within tolerance (no gradient)."""
    a = input.value if isinstance(input, Tensor) else input
    b = other.value if isinstance(other, Tensor) else other
    return builtins.bool(jnp.allclose(a, b, rtol=rtol, atol=atol))
