"""``SparseTensor``: torch's sparse COO tensor, a ``Tensor`` whose value is a BCOO.

torch has one ``Tensor`` class with a ``layout``; here a sparse tensor is the
subclass ``SparseTensor`` (``isinstance(t, tp.Tensor)`` holds, ``t.is_sparse`` is
True), made by ``tp.sparse_coo_tensor``, by sparse operations, and whenever the
tape or the wire hands over a sparse array (``Tensor._wrap`` picks the class).
Why its value is a ``jax.experimental.sparse.BCOO`` and what runs where is said
in ``autograd.sparse_arrays``.

The operations that keep a tensor sparse, each one recorded node whose backward
gives a sparse input a sparse gradient where torch does (``ops_sparse``): addition
(sparse + sparse is sparse, with a dense operand dense), subtraction, negation,
products with a scalar and with another sparse tensor, division by a scalar,
``coalesce``, ``sparse.sum`` (to a dense scalar, or over dimensions), ``to_dense``,
``values()``, ``mm``/``matmul`` with a dense matrix (dense), and ``stack``.
Anything else raises a ``TypeError`` that says to call ``to_dense()`` first.

Example:
    >>> import tensorplay_jax as tp
    >>> x = tp.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    >>> x.is_sparse, x.is_coalesced(), x.to_dense().tolist()
    (True, False, [[0.0, 0.0, 3.0], [4.0, 0.0, 5.0]])
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import is_grad_enabled
from tensorplay_jax.autograd import sparse_arrays as sa
from tensorplay_jax.tensors import _tensor
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["SparseTensor", "sparse_coo", "sparse_coo_tensor", "strided"]

# torch's layouts, as the strings ``Tensor.layout`` gives
strided = "strided"
sparse_coo = "sparse_coo"


def _dense_only(name: str) -> str:
    return (
        f"{name} does not support sparse tensors; call .to_dense() first (or use "
        "tp.sparse.sum, +, *, mm, coalesce, which keep them sparse)"
    )


# The sparse operations (``_sparse_ops``) import this module, so this one cannot import
# them: they register themselves here when imported (:func:`register_ops`; the package
# imports them with the operations), and the methods below reach them through it.
_OPS: Any = None


def register_ops(ops: Any) -> None:
    """Give the methods of :class:`SparseTensor` the sparse operations (``_sparse_ops``)."""
    global _OPS
    _OPS = ops


class SparseTensor(Tensor):
    """A sparse COO tensor (torch's ``layout=torch.sparse_coo``), on the local tape.

    ``indices`` are ``(sparse_dim, nnz)`` integers, ``values`` ``(nnz, *dense_shape)``;
    repeated indices are allowed (the tensor is then uncoalesced, and their values
    add up).
    """

    __slots__ = ()

    # ----------------------------------------------------------------- layout
    @property
    def is_sparse(self) -> bool:  # type: ignore[override]
        """True: this tensor is sparse COO."""
        return True

    @property
    def layout(self) -> str:
        """``tp.sparse_coo``, the string ``"sparse_coo"`` (torch's ``torch.sparse_coo``)."""
        return sparse_coo

    def sparse_dim(self) -> int:
        """How many leading dimensions are sparse."""
        return sa.sparse_dim(self._value)

    def dense_dim(self) -> int:
        """How many trailing dimensions each stored value has."""
        return self._value.ndim - sa.sparse_dim(self._value)

    def _nnz(self) -> int:
        """Number of stored values (repeats counted)."""
        return int(self._value.indices.shape[0])

    def is_coalesced(self) -> bool:
        """Whether the indices are sorted and unique (``coalesce()`` makes them so)."""
        return sa.is_coalesced(self._value)

    def numel(self) -> int:
        """Number of elements of the dense equivalent."""
        return int(np.prod(self.shape, dtype=np.int64))

    def dim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    # ----------------------------------------------------------------- parts
    def _indices(self) -> Tensor:
        """The stored indices, ``(sparse_dim, nnz)``, as they are (repeats included)."""
        return Tensor._wrap(self._value.indices.T)

    def _values(self) -> Tensor:
        """The stored values, ``(nnz, *dense_shape)``, as they are; not differentiable."""
        return Tensor._wrap(self._value.data)

    def indices(self) -> Tensor:
        """The indices of a coalesced tensor (``coalesce()`` first)."""
        self._need_coalesced("indices")
        return self._indices()

    def values(self) -> Tensor:
        """The values of a coalesced tensor; differentiable (the gradient is sparse)."""
        self._need_coalesced("values")
        return _OPS.values(self)

    def _need_coalesced(self, what: str) -> None:
        if not self.is_coalesced():
            raise RuntimeError(
                f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first"
            )

    # ----------------------------------------------------------------- conversions
    def to_dense(self) -> Tensor:
        """The dense tensor (differentiable: the gradient is sparse, on this pattern)."""
        return _OPS.to_dense(self)

    def coalesce(self) -> SparseTensor:
        """Sorted unique indices, repeated ones summed (``self`` if already coalesced)."""
        return _OPS.coalesce(self)

    def detach(self) -> SparseTensor:
        """A new leaf with the same indices and values, cut from the graph."""
        return Tensor._wrap(self._value)  # type: ignore[return-value]

    def clone(self) -> SparseTensor:
        """A copy (values are immutable arrays: the same ones); recorded like ``detach``
        is not: gradients pass through."""
        return _OPS.mul(self, 1)

    def numpy(self) -> np.ndarray:
        raise TypeError(_dense_only("numpy()"))

    def data_ptr(self) -> int:
        raise RuntimeError(
            "Cannot access data pointer of Tensor that doesn't have storage; use "
            "_values().data_ptr()"
        )

    def tolist(self) -> Any:
        raise TypeError(_dense_only("tolist()"))

    def item(self) -> Any:
        raise TypeError(_dense_only("item()"))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        raise TypeError(_dense_only("np.asarray"))

    def __reduce__(self) -> tuple[Any, ...]:
        m = self._value
        return (
            _rebuild,
            (np.asarray(m.indices), np.asarray(m.data), m.shape, sa.is_coalesced(m)),
        )

    # ----------------------------------------------------------------- in place
    def _write(self, new: Any, what: str) -> SparseTensor:
        if self._requires_grad and self._grad_fn is None and is_grad_enabled():
            raise RuntimeError(
                f"a leaf Variable that requires grad is being used in an in-place operation "
                f"({what}); do it under tp.no_grad() or on a detached tensor"
            )
        self._value = new._value
        self._version += 1
        return self

    def __imul__(self, other: Any) -> SparseTensor:
        return self._write(_OPS.mul(self, other), "mul_")

    def __itruediv__(self, other: Any) -> SparseTensor:
        return self._write(_OPS.div(self, other), "div_")

    def __iadd__(self, other: Any) -> SparseTensor:
        return self._write(_OPS.add(self, other), "add_")

    mul_ = __imul__
    div_ = __itruediv__
    add_ = __iadd__

    # ----------------------------------------------------------------- printing
    def __repr__(self) -> str:
        m = self._value
        idx = np.array2string(
            np.asarray(m.indices).T, separator=", ", prefix="tensor(indices=tensor(", threshold=100
        )
        vals = np.array2string(
            np.asarray(m.data),
            separator=", ",
            prefix="       values=tensor(",
            threshold=100,
            precision=4,
        )
        extras = [f"size={tuple(m.shape)}", f"nnz={m.indices.shape[0]}", "layout=sparse_coo"]
        if m.dtype not in _tensor._DEFAULT_DTYPES:
            extras.insert(0, f"dtype={m.dtype}")
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return (
            f"tensor(indices=tensor({idx}),\n       values=tensor({vals}),\n       "
            + ", ".join(extras)
            + ")"
        )


def _rebuild(
    indices: np.ndarray, values: np.ndarray, shape: tuple[int, ...], coalesced: bool
) -> SparseTensor:
    m = sa.bcoo_class()(
        (jnp.asarray(values), jnp.asarray(indices)),
        shape=tuple(shape),
        indices_sorted=coalesced,
        unique_indices=coalesced,
    )
    return Tensor._wrap(m)  # type: ignore[return-value]


def _learn(bcoo: type) -> None:
    _tensor.SPARSE[:] = [bcoo, SparseTensor]


sa.on_load(_learn)


def sparse_coo_tensor(
    indices: Any,
    values: Any,
    size: Any = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    check_invariants: bool | None = None,
    is_coalesced: bool | None = None,
) -> SparseTensor:
    """A sparse COO tensor with ``values[k]`` at ``indices[:, k]`` (torch's ``sparse_coo_tensor``).

    Args:
        indices: ``(sparse_dim, nnz)`` integers (nested lists, array or Tensor).
        values: ``(nnz, *dense_shape)`` values.
        size: the shape; by default the smallest that holds every index.
        dtype: the values' dtype (by default that of ``values``).
        device: ``None`` or the CPU (sparse tensors are not placed on accelerators here).
        requires_grad: make it a leaf that requires grad (float dtypes only).
        check_invariants: check that every index is within ``size`` (on by default).
        is_coalesced: declare the indices sorted and unique (torch's flag; not checked).

    Returns:
        The tensor, uncoalesced unless ``is_coalesced=True`` (repeats are allowed).

    Raises:
        ValueError: indices that are not 2-d integers, a count of values that does not
            match, or an index outside ``size``.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
        >>> x.shape, x._nnz()
        ((2, 3), 3)
    """
    from tensorplay_jax.runtime.device import to_device

    idx = np.asarray(indices._value if isinstance(indices, Tensor) else indices)
    if np.issubdtype(idx.dtype, np.floating) and np.array_equal(idx, np.trunc(idx)):
        idx = idx.astype(np.int64)  # whole numbers held as floats, as tensorplay casts them
    if idx.ndim != 2 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError(
            f"sparse_coo_tensor: indices must be a 2-d integer array (sparse_dim, nnz), got "
            f"shape {idx.shape} of dtype {idx.dtype}"
        )
    vals = values._value if isinstance(values, Tensor) else values
    vals = jnp.asarray(vals, dtype=dtype)
    nnz = idx.shape[1]
    if vals.ndim == 0 or vals.shape[0] != nnz:
        raise ValueError(
            f"sparse_coo_tensor: values have shape {tuple(vals.shape)}, need {nnz} rows (one "
            "per index column)"
        )
    if size is None:
        sparse = tuple(int(m) + 1 for m in idx.max(axis=1)) if nnz else (0,) * idx.shape[0]
        size = (*sparse, *vals.shape[1:])
    size = tuple(int(s) for s in size)
    if len(size) != idx.shape[0] + vals.ndim - 1 or tuple(size[idx.shape[0] :]) != vals.shape[1:]:
        raise ValueError(
            f"sparse_coo_tensor: size {size} does not fit indices of {idx.shape[0]} sparse "
            f"dimensions and values of shape {tuple(vals.shape)}"
        )
    if check_invariants is not False and nnz:
        bad = (idx < 0) | (idx >= np.asarray(size[: idx.shape[0]])[:, None])
        if bad.any():
            d, k = (int(a[0]) for a in np.nonzero(bad))
            raise ValueError(
                f"sparse_coo_tensor: index {int(idx[d, k])} in dimension {d} (column {k}) is "
                f"outside size {size}"
            )
    if device is not None and str(device).split(":")[0] != "cpu":
        raise NotImplementedError(
            f"sparse_coo_tensor: device={device!r}: sparse tensors live on the CPU here"
        )
    idx = idx.astype(jax.dtypes.canonicalize_dtype(np.int64))
    m = sa.from_coo(to_device(idx), vals, size, coalesced=bool(is_coalesced))
    t = Tensor._wrap(m)
    if requires_grad:
        t.requires_grad = True
    return t  # type: ignore[return-value]
