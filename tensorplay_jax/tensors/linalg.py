"""``tp.linalg``: torch's ``torch.linalg`` functions, each one recorded node (differentiable).

``multi_dot``, ``norm``, ``vector_norm``, ``matrix_norm``, ``inv``, ``solve``, ``det`` and
``cross`` follow torch's signatures and shape rules; the maths is JAX's
(``jnp.linalg``), except the vector norms, written out so that their gradient
at a zero vector is 0 as in torch (``jnp.linalg.norm``'s is NaN there), and
``|x|`` in the norms, whose gradient at 0 is 0 as torch's (``jnp.abs``'s is 1).

Example:
    >>> import tensorplay_jax as tp
    >>> tp.linalg.vector_norm(tp.tensor([3.0, 4.0]))
    tensor(5.)
    >>> tp.linalg.det(tp.eye(3) * 2)
    tensor(8.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors import _matrix_ops, _ops
from tensorplay_jax.tensors._tensor import Tensor

# (``tensor_norm`` is ``tp.norm`` / ``Tensor.norm``, not a name of ``tp.linalg``)
__all__ = ["cross", "det", "inv", "matrix_norm", "multi_dot", "norm", "solve", "vector_norm"]

_INF = math.inf


def _ndim(x: Any) -> int:
    return x.ndim if isinstance(x, Tensor) else np.ndim(x)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, Tensor) else np.shape(x)


def _dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % ndim if ndim else 0 for d in dims)


# ------------------------------------------------------------------ multi_dot
def _multi_dot(*xs: jax.Array) -> jax.Array:
    return jnp.linalg.multi_dot(xs)


def multi_dot(tensors: Sequence[Any]) -> Tensor:
    """The product of two or more matrices, multiplied in the cheapest order.

    The first Tensor may be 1-d (a row vector) and the last 1-d (a column
    vector); the others must be 2-d.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.multi_dot([tp.ones((2, 3)), tp.ones((3, 4)), tp.ones(4)])
        tensor([12., 12.])
    """
    xs = list(tensors)
    if len(xs) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(xs)}")
    for i, x in enumerate(xs):
        nd = _ndim(x)
        end = i in (0, len(xs) - 1)
        if nd != 2 and not (end and nd == 1):
            where = "first" if i == 0 else "last" if i == len(xs) - 1 else None
            raise RuntimeError(
                f"multi_dot(): the {where} tensor must be 1D or 2D but got {nd}D"
                if where
                else f"multi_dot(): tensor {i} must be 2D but got {nd}D"
            )
    for i in range(len(xs) - 1):
        inner, outer = _shape(xs[i])[-1], _shape(xs[i + 1])[0]
        if inner != outer:
            raise RuntimeError(
                f"multi_dot(): tensors {i} and {i + 1} with shapes {list(_shape(xs[i]))} and "
                f"{list(_shape(xs[i + 1]))} cannot be multiplied"
            )
    return call_op(_multi_dot, "LinalgMultiDotBackward", xs)


# ------------------------------------------------------------------ norms
def _safe_root(s: jax.Array, p: float) -> jax.Array:
    """``s ** (1/p)`` with gradient 0 (not NaN) where ``s == 0``."""
    pos = s > 0
    return jnp.where(pos, jnp.where(pos, s, 1.0) ** (1.0 / p), 0.0)


_abs = _ops.magnitude  # |x| with torch's gradient at 0


def _vector_norm(x: jax.Array, ord: float, dims: Any, keepdim: bool) -> jax.Array:
    a = _abs(x)
    if ord == _INF:
        return jnp.max(a, axis=dims, keepdims=keepdim)
    if ord == -_INF:
        return jnp.min(a, axis=dims, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=dims, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=dims, keepdims=keepdim)
    return _safe_root(jnp.sum(a**ord, axis=dims, keepdims=keepdim), ord)


def _check_inexact(fn: str, x: Any) -> None:
    """torch's error for a norm of integers or booleans (``dtype=`` does not make it one)."""
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    if not jnp.issubdtype(dtype, jnp.inexact):
        raise RuntimeError(
            f"{fn}: Expected a floating point or complex tensor as input. Got {dtype}"
        )


def vector_norm(
    x: Any, ord: float = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (every element as one vector when None).

    ``ord``: any real ``p``, ``inf`` (max ``|x|``), ``-inf`` (min) or ``0`` (count of
    non-zeros). ``dtype``: compute in this floating dtype.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.vector_norm(tp.tensor([[1.0, -2.0], [2.0, 0.0]]), ord=1, dim=1)
        tensor([3., 2.])
    """
    if not isinstance(ord, int | float) or isinstance(ord, bool):
        raise TypeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    _check_inexact("linalg.vector_norm", x)
    if dtype is not None:
        x = x.to(dtype) if isinstance(x, Tensor) else jnp.asarray(x, dtype)
    dims = _dims(dim, _ndim(x))
    static = (("ord", float(ord)), ("dims", dims), ("keepdim", bool(keepdim)))
    return call_op(_vector_norm, "LinalgVectorNormBackward", (x,), static)


def _matrix_norm(a: jax.Array, ord: Any, dims: tuple[int, int], keepdim: bool) -> jax.Array:
    if ord == "fro":
        return _vector_norm(a, 2.0, dims, keepdim)
    d0, d1 = dims
    if ord in ("nuc", 2, -2):
        moved = jnp.moveaxis(a, (d0, d1), (-2, -1))
        sv = jnp.linalg.svd(moved, compute_uv=False)
        out = jnp.sum(sv, -1) if ord == "nuc" else jnp.max(sv, -1) if ord == 2 else jnp.min(sv, -1)
    else:  # 1, -1: column sums; inf, -inf: row sums
        summed = jnp.sum(_abs(a), axis=d0 if abs(ord) == 1 else d1, keepdims=True)
        pick = jnp.max if ord > 0 else jnp.min
        out = pick(summed, axis=(d0, d1))
    if keepdim:
        out = jnp.expand_dims(out, tuple(sorted((d0, d1))))
    return out


_MATRIX_ORDS = ("fro", "nuc", _INF, -_INF, 1, -1, 2, -2)


def matrix_norm(
    A: Any, ord: Any = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False
) -> Tensor:
    """A matrix norm over the two dimensions ``dim`` (batched over the others).

    ``ord``: ``"fro"`` (Frobenius), ``"nuc"`` (sum of singular values), ``2`` / ``-2``
    (largest / smallest singular value), ``1`` / ``-1`` (max / min column sum of
    ``|A|``), ``inf`` / ``-inf`` (max / min row sum).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.matrix_norm(tp.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1)
        tensor(6.)
    """
    if ord not in _MATRIX_ORDS:
        raise RuntimeError(
            f"linalg.matrix_norm: Order {ord} not supported; expected one of "
            "'fro', 'nuc', inf, -inf, 1, -1, 2, -2"
        )
    _check_inexact("linalg.matrix_norm", A)
    nd = _ndim(A)
    if nd < 2:
        raise RuntimeError(
            f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions (got {nd})"
        )
    dims = _dims(dim, nd)
    if dims is None or len(dims) != 2 or dims[0] == dims[1]:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple of distinct ints, got {dim}")
    static = (("ord", ord), ("dims", dims), ("keepdim", bool(keepdim)))
    return call_op(_matrix_norm, "LinalgMatrixNormBackward", (A,), static)


def norm(
    A: Any, ord: Any = None, dim: Any = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:
    """torch's ``linalg.norm``: a vector norm or a matrix norm, chosen by ``dim`` and ``ord``.

    An int ``dim`` (or ``dim=None, ord=None``: every element as one vector) gives
    ``vector_norm``; a 2-tuple ``dim``, or ``dim=None`` with an ``ord`` on a 2-d
    input, gives ``matrix_norm``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.norm(tp.tensor([[3.0, 0.0], [0.0, 4.0]]))
        tensor(5.)
    """
    if dtype is not None:
        A = A.to(dtype) if isinstance(A, Tensor) else jnp.asarray(A, dtype)
    nd = _ndim(A)
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 1:
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim)
        return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim)
    if ord is None:
        return vector_norm(A, 2, None, keepdim)
    if nd == 1:
        return vector_norm(A, ord, None, keepdim)
    if nd == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim)
    raise RuntimeError(
        f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {nd}D."
    )


def tensor_norm(
    input: Any, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None
) -> Tensor:
    """tensorplay's ``tp.norm`` / ``Tensor.norm``: the ``p``-norm over ``dim`` (every
    element as one vector when None).

    ``p``: a number (``inf`` included: a vector norm, as ``linalg.vector_norm``),
    ``"fro"`` (the 2-norm of the elements over ``dim``) or ``"nuc"`` (the nuclear norm
    of the matrices over the two dimensions ``dim``, the last two when None).

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([[3.0, -4.0], [0.0, 0.0]])
        >>> x.norm(), x.norm(1), x.norm(dim=1)
        (tensor(5.), tensor(7.), tensor([5., 0.]))
    """
    if isinstance(p, str):
        if p == "fro":
            return vector_norm(input, 2, dim, keepdim, dtype=dtype)
        if p == "nuc":
            if dtype is not None:
                input = input.to(dtype) if isinstance(input, Tensor) else jnp.asarray(input, dtype)
            return matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)
        raise RuntimeError(f"norm: p={p!r} is not supported; use a number, 'fro' or 'nuc'")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


# ------------------------------------------------------------------ inverse, solve, det
def _square(fn: str, A: Any, name: str = "A") -> None:
    shape = _shape(A)
    if len(shape) < 2:
        raise RuntimeError(f"linalg.{fn}: The input tensor {name} must have at least 2 dimensions.")
    if shape[-1] != shape[-2]:
        raise RuntimeError(
            f"linalg.{fn}: {name} must be batches of square matrices, but they are "
            f"{shape[-2]} by {shape[-1]} matrices"
        )


def inv(A: Any) -> Tensor:
    """The inverse of a square matrix (or of each matrix of a batch).

    A singular matrix gives ``inf``/``nan`` entries (JAX does not raise; torch does).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.inv(tp.eye(2) * 4)
        tensor([[0.25, 0.  ],
                [0.  , 0.25]])
    """
    _square("inv", A)
    return call_op(jnp.linalg.inv, "LinalgInvExBackward", (A,))


def _solve(a: jax.Array, b: jax.Array, left: bool) -> jax.Array:
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return jnp.swapaxes(_solve(jnp.swapaxes(a, -1, -2), jnp.swapaxes(b, -1, -2), True), -1, -2)
    if b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]):
        return jnp.linalg.solve(a, b[..., None])[..., 0]
    return jnp.linalg.solve(a, b)


def solve(A: Any, B: Any, *, left: bool = True) -> Tensor:
    """The solution ``X`` of ``A X = B`` (``X A = B`` when ``left=False``).

    As in torch, ``B`` is a (batch of) vector(s) when it is 1-d or has ``A``'s
    shape without the last dimension; otherwise a (batch of) matrix(ces).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.solve(tp.eye(2) * 2, tp.tensor([2.0, 4.0]))
        tensor([1., 2.])
    """
    _square("solve", A)
    return call_op(_solve, "LinalgSolveExBackward", (A, B), (("left", bool(left)),))


def det(A: Any) -> Tensor:
    """The determinant of a square matrix (or of each matrix of a batch).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linalg.det(tp.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor(-2.)
    """
    _square("det", A)
    return call_op(jnp.linalg.det, "LinalgDetBackward", (A,))


def cross(input: Any, other: Any, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (the last by default: ``tp.cross``
    without ``dim`` takes the first of size 3)."""
    return _matrix_ops.cross(input, other, dim)
