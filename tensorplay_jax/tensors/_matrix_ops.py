"""Matrix and vector products and parts (``tril``, ``triu``, ``diag``, ``diagonal``,
``trace``, ``outer``, ``dot``, ``cross``, ``einsum``, ``addmm``), each one recorded node.

``tp.linalg`` holds the decompositions and norms; ``matmul``, ``mm`` and ``bmm`` are in
``_ops``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors import _ops
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["addmm", "cross", "diag", "diagonal", "dot", "einsum", "outer", "trace", "tril", "triu"]


def _ndim(x: Any) -> int:
    return int(np.ndim(x._value if isinstance(x, Tensor) else x))


def _tril(x: jax.Array, k: int) -> jax.Array:
    return jnp.tril(x, k)


def _triu(x: jax.Array, k: int) -> jax.Array:
    return jnp.triu(x, k)


def tril(input: Any, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions, from the ``diagonal``-th diagonal down;
    zeros above.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.tril(tp.ones(2, 2))
        tensor([[1., 0.],
                [1., 1.]])
    """
    if _ndim(input) < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return call_op(_tril, "TrilBackward", (input,), (("k", int(diagonal)),), saves=False)


def triu(input: Any, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions, from the ``diagonal``-th diagonal up."""
    if _ndim(input) < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return call_op(_triu, "TriuBackward", (input,), (("k", int(diagonal)),), saves=False)


def _diag(x: jax.Array, k: int) -> jax.Array:
    return jnp.diag(x, k)


def diag(input: Any, diagonal: int = 0) -> Tensor:
    """A 1-d Tensor: the square matrix with it on the ``diagonal``-th diagonal; a 2-d Tensor:
    that diagonal of it."""
    if _ndim(input) not in (1, 2):
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {_ndim(input)}D")
    return call_op(_diag, "DiagBackward", (input,), (("k", int(diagonal)),), saves=False)


def _diagonal(x: jax.Array, offset: int, axis1: int, axis2: int) -> jax.Array:
    return jnp.diagonal(x, offset, axis1, axis2)


def diagonal(input: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The ``offset``-th diagonal of the matrices spanned by ``dim1`` and ``dim2``, as the
    last dimension."""
    nd = _ndim(input)
    a1, a2 = (int(d) % max(nd, 1) for d in (dim1, dim2))
    if a1 == a2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    static = (("offset", int(offset)), ("axis1", a1), ("axis2", a2))
    return call_op(_diagonal, "DiagonalBackward", (input,), static, saves=False)


def _trace(x: jax.Array) -> jax.Array:
    return jnp.trace(x)


def trace(input: Any) -> Tensor:
    """The sum of a matrix's main diagonal."""
    if _ndim(input) != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {_ndim(input)}")
    return call_op(_trace, "TraceBackward", (input,), saves=False)


def outer(input: Any, vec2: Any) -> Tensor:
    """The outer product of two 1-d Tensors: ``out[i, j] = input[i] * vec2[j]``."""
    if _ndim(input) != 1 or _ndim(vec2) != 1:
        raise RuntimeError("outer: expected two 1-D tensors")
    return call_op(jnp.outer, "OuterBackward", (input, vec2))


def dot(input: Any, tensor: Any) -> Tensor:
    """The inner product of two 1-d Tensors of the same length.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.dot(tp.tensor([1.0, 2.0]), tp.tensor([3.0, 4.0]))
        tensor(11.)
    """
    if _ndim(input) != 1 or _ndim(tensor) != 1:
        raise RuntimeError(
            f"1D tensors expected, but got {_ndim(input)}D and {_ndim(tensor)}D tensors"
        )
    return call_op(jnp.dot, "DotBackward", (input, tensor))


def _cross(a: jax.Array, b: jax.Array, axis: int) -> jax.Array:
    return jnp.cross(a, b, axis=axis)


def cross(input: Any, other: Any, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (without it: the first dimension of
    size 3, as torch's ``cross`` does)."""
    shape = np.shape(input._value if isinstance(input, Tensor) else input)
    if dim is None:
        dims = [d for d, n in enumerate(shape) if n == 3]
        if not dims:
            raise RuntimeError("no dimension of size 3 in input")
        dim = dims[0]
    axis = int(dim) % max(len(shape), 1)
    if shape[axis] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {shape[axis]}"
        )
    return call_op(_cross, "CrossBackward", (input, other), (("axis", axis),))


def _einsum(*operands: jax.Array, equation: str) -> jax.Array:
    return jnp.einsum(equation, *operands)


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation, as NumPy's and torch's (operands as arguments or one list).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.einsum("ij,j->i", tp.ones(2, 3), tp.tensor([1.0, 2.0, 3.0]))
        tensor([6., 6.])
    """
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    return call_op(_einsum, "EinsumBackward", operands, (("equation", str(equation)),))


def addmm(input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)``."""
    if _ndim(mat1) != 2 or _ndim(mat2) != 2:
        raise RuntimeError("addmm: mat1 and mat2 must be matrices")
    product = _ops.mm(mat1, mat2)
    if alpha != 1:
        product = _ops.mul(product, alpha)
    return _ops.add(input if beta == 1 else _ops.mul(input, beta), product)
