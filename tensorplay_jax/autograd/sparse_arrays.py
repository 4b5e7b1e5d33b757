"""Sparse COO arrays as the tape carries them: ``jax.experimental.sparse.BCOO``, and their kernels.

Why BCOO: JAX 0.10 has one sparse array type that is a pytree, survives ``jit`` and
carries torch's hybrid layout (``n_dense`` trailing dense dimensions, an embedding
gradient's ``(nnz, dim)`` rows), and that is ``jax.experimental.sparse.BCOO``. Its
module says it is a reference implementation that is no longer actively developed
(kept working, not extended), and its ``sparsify`` arithmetic grows the number of
stored elements with every product. So BCOO is only the container and the
compiled parts that do fit it (``todense``, ``bcoo_dot_general``, gathers,
``segment_sum``); what torch does to indices (coalescing, which reorders and
merges them, and intersecting patterns) has a size known only from the data and
runs here on the host with NumPy, once per eager operation.

The layout: torch's ``indices`` are ``(sparse_dim, nnz)``, BCOO's are ``(nnz,
sparse_dim)`` (we keep BCOO's and transpose at the API); ``values`` are ``(nnz,
*dense_shape)`` in both. A BCOO is coalesced (torch's ``is_coalesced``) when its
``indices_sorted`` and ``unique_indices`` flags are both set; coalescing sorts the
indices row-major, as torch does.

This module sits in ``autograd`` because the tape itself adds sparse gradients
(:func:`add`): ``autograd.add_gradients`` comes here for a BCOO operand.

Example:
    >>> import numpy as np

from tensorplay_jax.runtime.device import to_device
    >>> m = from_coo(np.array([[0, 0], [1, 1]]), np.array([1.0, 2.0]), (2, 2))
    >>> c = coalesce(m)
    >>> c.indices.tolist(), c.data.tolist(), is_coalesced(c)
    ([[0, 1]], [3.0], True)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.runtime.device import to_device

if TYPE_CHECKING:
    from jax.experimental.sparse import BCOO

__all__ = [
    "add",
    "bcoo_class",
    "on_load",
    "coalesce",
    "from_coo",
    "is_coalesced",
    "is_sparse_array",
    "keys",
    "mask",
    "sparse_dim",
    "values_at",
]


_BCOO: Any = None  # the BCOO class, once jax.experimental.sparse is loaded
_on_load: list[Callable[[type], None]] = []


def on_load(fn: Callable[[type], None]) -> None:
    """Call ``fn(BCOO)`` once the BCOO class is loaded (at once if it is): the Tensor class
    learns then which values make a sparse Tensor, with no import before that."""
    _on_load.append(fn)
    if _BCOO is not None:
        fn(_BCOO)


def bcoo_class() -> type[BCOO]:
    """The BCOO class; imports ``jax.experimental.sparse`` (about half a second) on first use,
    so a program that makes no sparse tensor never pays for it."""
    global _BCOO
    if _BCOO is None:
        from jax.experimental.sparse import BCOO

        _BCOO = BCOO
        for fn in _on_load:
            fn(BCOO)
    return _BCOO


def is_sparse_array(x: Any) -> bool:
    """Whether ``x`` is a sparse array (a BCOO); imports nothing."""
    if _BCOO is None:
        if "jax.experimental.sparse" not in sys.modules:
            return False
        bcoo_class()
    return type(x) is _BCOO


def sparse_dim(m: BCOO) -> int:
    """How many leading dimensions are sparse (torch's ``sparse_dim()``)."""
    return int(m.indices.shape[-1])


def from_coo(indices: Any, values: Any, shape: tuple[int, ...], *, coalesced: bool = False) -> BCOO:
    """A BCOO from torch's layout: ``indices`` ``(sparse_dim, nnz)``, ``values`` ``(nnz, ...)``."""
    idx = jnp.asarray(indices).T
    return bcoo_class()(
        (jnp.asarray(values), idx),
        shape=tuple(shape),
        indices_sorted=coalesced,
        unique_indices=coalesced,
    )


def is_coalesced(m: BCOO) -> bool:
    """torch's ``is_coalesced()``: sorted row-major, no index twice."""
    return bool(m.indices_sorted and m.unique_indices)


def keys(idx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """One int64 key per index row, in row-major order (what coalescing sorts by)."""
    if idx.shape[0] == 0:
        return np.zeros(0, np.int64)
    return np.ravel_multi_index(tuple(idx.T.astype(np.int64)), shape).astype(np.int64)


def _rows(keys: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if keys.size == 0:
        return np.zeros((0, len(shape)), dtype)
    return np.stack(np.unravel_index(keys, shape), axis=1).astype(dtype)


def coalesce(m: BCOO) -> BCOO:
    """Indices sorted row-major and unique, the values of repeated indices summed.

    All on the host (NumPy): the stored count is data-dependent, and a compiled
    ``segment_sum`` or gather would compile anew for each count.
    """
    if is_coalesced(m):
        return m
    idx = np.asarray(m.indices)
    sshape = tuple(m.shape[: idx.shape[1]])
    uniq, first, inverse, counts = np.unique(
        keys(idx, sshape), return_index=True, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    if len(uniq) == len(inverse):  # no repeats: only the order may change
        if np.array_equal(first, np.arange(len(first))):
            data, rows = m.data, m.indices
        else:
            data, rows = to_device(np.asarray(m.data)[first]), to_device(idx[first])
    else:
        order = np.argsort(inverse, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        data = to_device(np.add.reduceat(np.asarray(m.data)[order], starts, axis=0))
        rows = to_device(_rows(uniq, sshape, idx.dtype))
    return bcoo_class()((data, rows), shape=m.shape, indices_sorted=True, unique_indices=True)


def values_at(g: Any, idx: np.ndarray) -> jax.Array:
    """The entries of ``g`` (dense, or a BCOO with the same sparse dimensions) at the index
    rows ``idx`` (``(n, sparse_dim)``, repeats allowed): ``(n, *dense_shape)``; zero where
    a sparse ``g`` stores nothing."""
    if not is_sparse_array(g):
        return jnp.asarray(g)[tuple(np.asarray(idx).T)]
    gc = coalesce(g)
    sshape = tuple(g.shape[: idx.shape[1]])
    have = keys(np.asarray(gc.indices), sshape)
    want = keys(np.asarray(idx), sshape)
    if np.array_equal(have, want):
        return gc.data
    data = np.asarray(gc.data)
    out = np.zeros((len(want), *data.shape[1:]), data.dtype)
    if len(have):
        pos = np.clip(np.searchsorted(have, want), 0, len(have) - 1)
        found = have[pos] == want
        out[found] = data[pos[found]]
    return to_device(out)


def mask(g: Any, like: BCOO) -> BCOO:
    """``g`` (dense or sparse) restricted to the pattern of ``like`` (coalesced): torch's
    ``sparse_mask``, the gradient a sparse input gets from a dense one."""
    c = coalesce(like)
    if is_sparse_array(g) and g.indices is c.indices:
        return g
    idx = np.asarray(c.indices)
    return bcoo_class()(
        (values_at(g, idx), c.indices), shape=like.shape, indices_sorted=True, unique_indices=True
    )


def add(a: Any, b: Any) -> Any:
    """``a + b`` where either is a BCOO: sparse + sparse stays sparse (indices concatenated,
    uncoalesced, as torch's gradient accumulation gives); sparse + dense is dense."""
    if is_sparse_array(a) and is_sparse_array(b):
        if a.shape != b.shape:
            raise RuntimeError(
                f"adding sparse tensors of different shapes: {tuple(a.shape)} and "
                f"{tuple(b.shape)}; sparse addition needs equal shapes"
            )
        # On the host: the stored count grows with every sum, and jnp.concatenate would
        # compile a program for each new count (the gradients of many passes of a context).
        dtype = jnp.result_type(a.data.dtype, b.data.dtype)
        data = np.concatenate([np.asarray(a.data, dtype), np.asarray(b.data, dtype)])
        idx = np.concatenate([np.asarray(a.indices), np.asarray(b.indices, a.indices.dtype)])
        return bcoo_class()((to_device(data), to_device(idx)), shape=a.shape)
    sparse, dense = (a, b) if is_sparse_array(a) else (b, a)
    dense = jnp.asarray(dense)
    dtype = jnp.result_type(dense.dtype, sparse.data.dtype)
    out = jnp.broadcast_to(dense, sparse.shape).astype(dtype)
    rows = tuple(jnp.asarray(sparse.indices).T)
    return out.at[rows].add(sparse.data.astype(dtype))
