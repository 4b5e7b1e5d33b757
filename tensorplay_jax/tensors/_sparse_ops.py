"""The operations on sparse COO tensors, each one recorded node with torch's gradients.

Every function here takes at least one ``SparseTensor``; ``_ops`` sends ``+``, ``-``,
``*``, ``/`` and ``@`` here when an operand is sparse (:func:`binary`). The value of
each result is what torch computes, and so is its layout (what stays sparse):

======================  ==========  ===========================================
operation               result      gradient of a sparse input
======================  ==========  ===========================================
``to_sparse`` of dense  sparse      (a dense input) the gradient made dense
``to_dense``            dense       the dense gradient on the input's pattern
``coalesce``            sparse      the gradient as it is
``values()``            dense       sparse, on the input's indices
``sparse.sum`` (all)    dense 0-d   sparse, the scalar on every stored index
``sparse.sum(dim)``     sparse      sparse, on the input's pattern
sparse + sparse         sparse      the gradient as it is (so each adds it)
sparse + dense          dense       the (dense) gradient as it is, as torch's
sparse * scalar         sparse      the gradient times the scalar
sparse * sparse         sparse      sparse, on the common indices
``mm`` sparse @ dense   dense       sparse, on the input's pattern
``stack`` of sparse     sparse      sparse, the slice of each
======================  ==========  ===========================================

Index work runs on the host (``autograd.sparse_arrays``); values stay JAX arrays.
"""

from __future__ import annotations

import builtins
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import attach_outputs, is_grad_enabled, make_node
from tensorplay_jax.autograd import sparse_arrays as sa
from tensorplay_jax.runtime.device import to_device
from tensorplay_jax.tensors import _sparse
from tensorplay_jax.tensors._host import concrete
from tensorplay_jax.tensors._sparse import SparseTensor, _dense_only
from tensorplay_jax.tensors._tensor import Tensor

__all__ = [
    "add",
    "binary",
    "coalesce",
    "div",
    "mm",
    "mul",
    "neg",
    "stack",
    "sub",
    "sum",
    "to_dense",
    "to_sparse",
    "values",
]

Backward = Callable[[tuple[Any, ...]], Sequence[Any]]


def _record(name: str, out: Any, inputs: Sequence[Any], backward: Backward) -> Any:
    """``out`` as a Tensor produced by one node over the Tensors among ``inputs``."""
    tensors = [t for t in inputs if isinstance(t, Tensor)]
    if not (is_grad_enabled() and builtins.any(t._requires_grad for t in tensors)):
        return Tensor._wrap(out)

    def run(grads: tuple[Any, ...]) -> Sequence[Any]:
        (g,) = grads
        per_input = backward(g)
        return [gi for gi, t in zip(per_input, inputs, strict=True) if isinstance(t, Tensor)]

    node = make_node(run, tensors, name=name)
    (res,) = attach_outputs(node, [out])
    return res


def _bcoo(data: Any, indices: Any, shape: tuple[int, ...], coalesced: bool = False) -> Any:
    return sa.bcoo_class()(
        (data, indices), shape=tuple(shape), indices_sorted=coalesced, unique_indices=coalesced
    )


def _is_sparse(x: Any) -> bool:
    return isinstance(x, SparseTensor)


def _dense_value(x: Any) -> Any:
    return x._value if isinstance(x, Tensor) else jnp.asarray(x)


# ------------------------------------------------------------------ conversions
def to_sparse(
    x: Tensor,
    sparse_dim: int | None = None,
    *,
    layout: Any = None,
    blocksize: Any = None,
    dense_dim: int | None = None,
) -> SparseTensor:
    """``x`` as a coalesced sparse COO tensor of its nonzero entries (torch's ``to_sparse``).

    The first ``sparse_dim`` dimensions (all, by default; ``x.dim() - dense_dim`` when
    ``dense_dim`` is given) are sparse: a slice over the others is stored when any of its
    entries is nonzero (NaN counts as nonzero, ``-0.0`` does not). Differentiable: the
    input's gradient is the result's, made dense. A sparse ``x`` comes back as it is.
    Eager only: how many entries are stored depends on the values, which a JAX trace
    does not have.

    Args:
        x: a Tensor.
        sparse_dim: how many leading dimensions are sparse.
        layout: ``None`` or ``"sparse_coo"`` (``tp.sparse_coo``); other layouts (CSR, CSC,
            BSR, BSC) are not available here.
        blocksize: for the block layouts only: must be ``None``.
        dense_dim: how many trailing dimensions stay dense (instead of ``sparse_dim``).

    Raises:
        RuntimeError: a ``sparse_dim``/``dense_dim`` outside torch's range, or a sparse ``x``
            asked for another ``sparse_dim``.
        NotImplementedError: another layout, or a ``blocksize``.
        TypeError: ``x`` holds a JAX tracer (inside ``jax.jit``, ``jax.grad``, ...).

    Example:
        >>> import tensorplay_jax as tp
        >>> s = tp.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
        >>> s.indices().tolist(), s.values().tolist(), s.is_coalesced()
        ([[0, 1], [1, 0]], [2.0, 3.0], True)
    """
    if layout is not None and layout != _sparse.sparse_coo:
        raise NotImplementedError(
            f"to_sparse: layout={layout!r}: only the sparse COO layout (tp.sparse_coo) is "
            "available here"
        )
    if blocksize is not None:
        raise NotImplementedError("to_sparse: blocksize is for the block layouts (BSR, BSC)")
    nd = x.dim()
    if dense_dim is not None:
        if sparse_dim is not None:
            raise TypeError("to_sparse: give sparse_dim or dense_dim, not both")
        dense_dim = operator.index(dense_dim)
        if nd > 0 and dense_dim == nd:
            raise RuntimeError(
                "dense_to_sparse: dense_dim argument must be !=self.dim() when self.dim()>0"
            )
        if not 0 <= dense_dim <= nd:
            raise RuntimeError(
                f"dense_to_sparse: dense_dim argument must be in [0,{nd}] range, but "
                f"{dense_dim} is given"
            )
        sparse_dim = nd - dense_dim
    sd = nd if sparse_dim is None else operator.index(sparse_dim)
    if _is_sparse(x):
        if sd != x.sparse_dim():
            raise RuntimeError(
                "to_sparse: conversion from Sparse to Sparse with sparse_dim argument "
                "!=self.sparse_dim() is not supported"
            )
        return x  # type: ignore[return-value]
    if not 0 <= sd <= nd:
        raise RuntimeError(
            f"dense_to_sparse: sparse_dim argument must be in [0,{nd}] range, but {sd} is given"
        )
    if nd > 0 and sd == 0:
        raise RuntimeError("dense_to_sparse: sparse_dim argument must be in >0 when self.dim()>0")
    v = x._value
    host = concrete(v, "to_sparse")
    nonzero = host != 0
    if sd < nd:
        nonzero = nonzero.reshape(*host.shape[:sd], -1).any(axis=-1)
    idx = np.stack(np.nonzero(nonzero)) if sd else np.zeros((0, int(nonzero)), np.int64)
    rows = tuple(idx)
    data = v[rows] if sd else jnp.reshape(v, (-1,))[: idx.shape[1]]
    idx = to_device(idx.astype(jax.dtypes.canonicalize_dtype(np.int64)))
    out = sa.from_coo(idx, data, tuple(host.shape), coalesced=True)

    def back(g: Any) -> list[Any]:
        return [g.todense() if sa.is_sparse_array(g) else g]

    return _record("ToSparseBackward", out, [x], back)


def to_dense(x: SparseTensor) -> Tensor:
    """The dense equivalent of ``x``; its gradient is ``x``'s pattern of the dense one."""
    m = x._value
    return _record("ToDenseBackward", m.todense(), [x], lambda g: [sa.mask(g, m)])


def coalesce(x: SparseTensor) -> SparseTensor:
    """Indices sorted and unique, repeats summed; ``x`` itself if already coalesced."""
    if x.is_coalesced():
        return x
    return _record("CoalesceBackward", sa.coalesce(x._value), [x], lambda g: [g])


def values(x: SparseTensor) -> Tensor:
    """The stored values of ``x`` (coalesced), differentiably."""
    m = x._value
    return _record(
        "ValuesBackward", m.data, [x], lambda g: [_bcoo(g, m.indices, m.shape, sa.is_coalesced(m))]
    )


# ------------------------------------------------------------------ reductions
def sum(input: SparseTensor, dim: Any = None, dtype: Any = None) -> Tensor:
    """torch's ``sparse.sum``: all elements (a dense 0-d tensor), or over ``dim`` (sparse
    while a sparse dimension is kept, else dense).

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
        >>> tp.sparse.sum(x)
        tensor(12.)
    """
    if not _is_sparse(input):
        raise TypeError(f"sparse.sum: input must be a sparse tensor, got {type(input).__name__}")
    m = input._value
    data = m.data if dtype is None else m.data.astype(dtype)
    c_idx = lambda: sa.coalesce(m).indices
    if dim is None:

        def back_all(g: Any) -> list[Any]:
            idx = c_idx()
            vals = jnp.broadcast_to(
                jnp.asarray(g, data.dtype), (idx.shape[0], *m.shape[idx.shape[1] :])
            )
            return [_bcoo(vals, idx, m.shape, True)]

        return _record("SumBackward", jnp.sum(data), [input], back_all)
    dims = sorted({d % m.ndim for d in ((dim,) if isinstance(dim, int) else dim)})
    ns = sa.sparse_dim(m)
    kept_sparse = [d for d in range(ns) if d not in dims]
    dense_axes = tuple(1 + d - ns for d in dims if d >= ns)
    summed = jnp.sum(data, axis=dense_axes) if dense_axes else data
    out_shape = tuple(s for d, s in enumerate(m.shape) if d not in dims)
    if kept_sparse:
        idx = m.indices[:, np.asarray(kept_sparse)]
        out: Any = sa.coalesce(_bcoo(summed, idx, out_shape))
    else:
        out = jnp.sum(summed, axis=0)

    def back_dims(g: Any) -> list[Any]:
        idx = np.asarray(c_idx())
        vals = (
            sa.values_at(g, idx[:, kept_sparse])
            if kept_sparse
            else jnp.broadcast_to(g, (idx.shape[0], *jnp.shape(g)))
        )
        for a in dense_axes:
            vals = jnp.expand_dims(vals, a)
        vals = jnp.broadcast_to(vals, (idx.shape[0], *m.shape[ns:]))
        return [_bcoo(vals, jnp.asarray(idx), m.shape, True)]

    return _record("SparseSumBackward", out, [input], back_dims)


# ------------------------------------------------------------------ arithmetic
def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with a sparse operand: sparse when both are, else dense."""
    if _is_sparse(a) and _is_sparse(b):
        ma, mb = a._value, b._value
        if ma.shape != mb.shape:
            raise RuntimeError(
                f"add: sparse tensors of shapes {tuple(ma.shape)} and {tuple(mb.shape)}; "
                "they must be equal"
            )
        if ma.indices.shape == mb.indices.shape and np.array_equal(
            np.asarray(ma.indices), np.asarray(mb.indices)
        ):
            out = _bcoo(ma.data + mb.data, ma.indices, ma.shape, sa.is_coalesced(ma))
        elif sa.is_coalesced(ma) and sa.is_coalesced(mb):
            out = sa.coalesce(sa.add(ma, mb))
        else:
            out = sa.add(ma, mb)
    else:
        out = sa.add(_dense_value(a), _dense_value(b))
    return _record("AddBackward", out, [a, b], lambda g: [g, g])


def neg(x: SparseTensor) -> SparseTensor:
    """``-x``."""
    return mul(x, -1)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` with a sparse operand."""
    return add(a, neg(b) if _is_sparse(b) else _negated(b))


def _negated(x: Any) -> Any:
    return -x  # a dense Tensor's or a number's own negation


def _scalar(x: Any) -> bool:
    return isinstance(x, int | float | complex | np.number) or (
        isinstance(x, Tensor | np.ndarray)
        and not _is_sparse(x)
        and np.ndim(x._value if isinstance(x, Tensor) else x) == 0
    )


def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` with a sparse operand and a scalar or another sparse tensor (of one shape)."""
    if _is_sparse(b) and not _is_sparse(a):
        a, b = b, a
    if _is_sparse(b):
        return _mul_sparse(a, b)
    if not _scalar(b):
        raise TypeError(
            "mul: a sparse tensor multiplies a scalar or a sparse tensor of its shape here; "
            "for a dense operand call .to_dense() first"
        )
    m = a._value
    s = _dense_value(b)
    out = _bcoo(m.data * s, m.indices, m.shape, sa.is_coalesced(m))

    def back(g: Any) -> list[Any]:
        ga = g * s if sa.is_sparse_array(g) else sa.mask(g, m) * s
        gb = None
        if isinstance(b, Tensor) and b._requires_grad:
            gb = jnp.sum(sa.values_at(g, np.asarray(m.indices)) * m.data).astype(s.dtype)
        return [ga, gb]

    return _record("MulBackward", out, [a, b], back)


def _mul_sparse(a: SparseTensor, b: SparseTensor) -> Tensor:
    ma, mb = sa.coalesce(a._value), sa.coalesce(b._value)
    if ma.shape != mb.shape:
        raise RuntimeError(
            f"mul: sparse tensors of shapes {tuple(ma.shape)} and {tuple(mb.shape)}; they must "
            "be equal"
        )
    ia_np, ib_np = np.asarray(ma.indices), np.asarray(mb.indices)
    sshape = tuple(ma.shape[: ia_np.shape[1]])
    ka = (
        np.ravel_multi_index(tuple(ia_np.T.astype(np.int64)), sshape) if len(ia_np) else ia_np[:, 0]
    )
    kb = (
        np.ravel_multi_index(tuple(ib_np.T.astype(np.int64)), sshape) if len(ib_np) else ib_np[:, 0]
    )
    _, pa, pb = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    idx = jnp.asarray(ia_np[pa])
    va, vb = ma.data[jnp.asarray(pa)], mb.data[jnp.asarray(pb)]
    out = _bcoo(va * vb, idx, ma.shape, True)

    def back(g: Any) -> list[Any]:
        gv = sa.values_at(g, ia_np[pa])
        return [_bcoo(gv * vb, idx, ma.shape, True), _bcoo(gv * va, idx, ma.shape, True)]

    return _record("MulBackward", out, [a, b], back)


def div(a: Any, b: Any) -> Tensor:
    """``a / b``: a sparse ``a`` by a scalar."""
    if _is_sparse(b) or not _scalar(b):
        raise TypeError(
            "div: a sparse tensor divides by a scalar only here; call .to_dense() first"
        )
    if isinstance(b, Tensor):
        return mul(a, 1.0 / b)
    m = a._value
    data = m.data / b
    out = _bcoo(data, m.indices, m.shape, sa.is_coalesced(m))
    return _record(
        "DivBackward",
        out,
        [a],
        lambda g: [g / b if sa.is_sparse_array(g) else sa.mask(g, m) / b],
    )


def mm(a: Any, b: Any) -> Tensor:
    """``a @ b`` of a 2-d sparse ``a`` and a dense ``b`` (1-d or 2-d): dense."""
    if not _is_sparse(a) or _is_sparse(b) or a.ndim != 2 or a.dense_dim() != 0:
        raise TypeError(
            "mm: the product here is a 2-d sparse matrix (no dense dimensions) times a dense "
            "matrix or vector; call .to_dense() on the others"
        )
    m = a._value
    w = _dense_value(b)
    if w.ndim not in (1, 2) or w.shape[0] != m.shape[1]:
        raise RuntimeError(f"mm: shapes {tuple(m.shape)} and {tuple(w.shape)} cannot be multiplied")
    out = m @ w

    def back(g: Any) -> list[Any]:
        c = sa.coalesce(m)
        rows, cols = (np.asarray(c.indices)[:, k] for k in (0, 1))
        g2 = g if w.ndim == 2 else g[:, None]
        w2 = w if w.ndim == 2 else w[:, None]
        gv = jnp.sum(g2[rows] * w2[cols], axis=-1).astype(m.dtype)
        ga = _bcoo(gv, c.indices, m.shape, True)
        gb = (m.T @ g).astype(w.dtype)
        return [ga, gb]

    return _record("MmBackward", out, [a, b], back)


def stack(tensors: Sequence[SparseTensor], dim: int = 0) -> SparseTensor:
    """Sparse tensors of one shape stacked along a new leading dimension (``dim=0``)."""
    if dim != 0 or not builtins.all(_is_sparse(t) for t in tensors):
        raise TypeError("stack: sparse tensors stack along dim=0, all of them sparse")
    ms = [t._value for t in tensors]
    if len({m.shape for m in ms}) != 1:
        raise RuntimeError(
            f"stack expects each tensor to be equal size, got {[m.shape for m in ms]}"
        )
    idx = jnp.concatenate(
        [
            jnp.concatenate([jnp.full((m.indices.shape[0], 1), i, m.indices.dtype), m.indices], 1)
            for i, m in enumerate(ms)
        ]
    )
    data = jnp.concatenate([m.data for m in ms])
    out = _bcoo(data, idx, (len(ms), *ms[0].shape))
    ns = sa.sparse_dim(ms[0])

    def back(g: Any) -> list[Any]:
        grads = []
        for i, m in enumerate(ms):
            c = sa.coalesce(m)
            rows = np.asarray(c.indices)
            full = np.concatenate([np.full((len(rows), 1), i, rows.dtype), rows], 1)
            grads.append(_bcoo(sa.values_at(g, full[:, : ns + 1]), c.indices, m.shape, True))
        return grads

    return _record("StackBackward", out, list(tensors), back)


_BINARY = {"add": add, "subtract": sub, "multiply": mul, "true_divide": div, "divide": div}


def binary(fn: Any, name: str, a: Any, b: Any) -> Tensor:
    """A binary operation of ``_ops`` with a sparse operand (``fn`` is its JAX function)."""
    op = _BINARY.get(getattr(fn, "__name__", ""))
    if op is None:
        if getattr(fn, "__name__", "") == "matmul":
            return mm(a, b)
        raise TypeError(_dense_only(f"tp.{name.removesuffix('Backward').lower()}"))
    return op(a, b)


_sparse.register_ops(sys.modules[__name__])
