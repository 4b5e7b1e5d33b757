"""Embedding lookups with sparse gradients, and bags of embeddings (``embedding_bag``).

A lookup reads a few rows of a table; with ``sparse=True`` its gradient for the
table is a sparse COO tensor holding only those rows (torch's layout: one index
per looked-up row, in input order, repeats kept, the ``padding_idx`` ones left
out), so a step costs what the batch touches, not what the table holds.

``embedding_bag`` reduces each bag of looked-up rows (``sum``, ``mean`` or
``max``). Bags are the rows of a 2-d input, or the runs of a 1-d input that
``offsets`` start. The reduction is one JAX function of the gathered rows: the
dense path records it (with the gather) as one node through ``tp.apply``; the
sparse path takes its VJP with respect to the gathered rows, which are the values
of the sparse gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import apply, attach_outputs, is_grad_enabled, make_node
from tensorplay_jax.autograd import sparse_arrays as sa
from tensorplay_jax.tensors import Tensor

__all__ = ["embedding_bag", "sparse_embedding"]

_MODES = ("sum", "mean", "max")


def _is_int(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and bool(np.issubdtype(dtype, np.integer))


def _host_ints(x: Any, what: str) -> np.ndarray:
    arr = np.asarray(x._value if isinstance(x, Tensor) else x)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{what} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _sparse_rows(values: Any, idx: np.ndarray, keep: np.ndarray, shape: tuple[int, ...]) -> Any:
    """The table's gradient: ``values[k]`` at row ``idx[k]`` for each kept ``k``."""
    k = np.nonzero(keep)[0]
    rows = jnp.asarray(idx[k].reshape(-1, 1).astype(jax.dtypes.canonicalize_dtype(np.int64)))
    return sa.bcoo_class()((values[jnp.asarray(k)], rows), shape=tuple(shape))


def _record(name: str, out: Any, inputs: list[Any], backward: Any) -> Tensor:
    node = make_node(backward, inputs, name=name)
    (res,) = attach_outputs(node, [out])
    return res


def sparse_embedding(input: Any, weight: Tensor, padding_idx: int | None) -> Tensor:
    """Rows of ``weight`` at ``input``; the gradient of ``weight`` is sparse (see the module)."""
    idx = _host_ints(input, "embedding: input")
    w = weight.value
    out = jnp.take(w, jnp.asarray(idx), axis=0)
    if not (weight.requires_grad and is_grad_enabled()):
        return Tensor._wrap(out)
    flat = idx.reshape(-1)
    keep = flat != padding_idx if padding_idx is not None else np.ones(flat.shape, bool)

    shape = tuple(w.shape)  # not the array: an optimizer may take its buffer donated

    def back(grads: tuple[Any, ...]) -> list[Any]:
        (g,) = grads
        return [_sparse_rows(jnp.reshape(g, (flat.size, shape[1])), flat, keep, shape)]

    return _record("EmbeddingBackward", out, [weight], back)


# ------------------------------------------------------------------ bags
def _bag(
    weight: jax.Array,
    idx: jax.Array | None,
    seg: jax.Array,
    keep: jax.Array,
    psw: jax.Array | None,
    *,
    num_bags: int,
    mode: str,
) -> jax.Array:
    """Each bag's ``mode`` of its kept rows (an empty bag gives zeros).

    The rows are ``weight``'s rows ``idx``, or ``weight`` itself when ``idx`` is None
    (rows already gathered); row ``i`` belongs to bag ``seg[i]``.
    """
    rows = weight if idx is None else jnp.take(weight, idx, axis=0)
    k = keep[:, None]
    if mode == "sum":
        weighted = rows if psw is None else rows * psw[:, None].astype(rows.dtype)
        return jax.ops.segment_sum(jnp.where(k, weighted, 0), seg, num_bags)
    count = jax.ops.segment_sum(keep.astype(rows.dtype), seg, num_bags)[:, None]
    if mode == "mean":
        total = jax.ops.segment_sum(jnp.where(k, rows, 0), seg, num_bags)
        return total / jnp.maximum(count, 1)
    low = jnp.array(-jnp.inf, rows.dtype)
    best = jax.ops.segment_max(jnp.where(k, rows, low), seg, num_bags)
    return jnp.where(count > 0, best, 0)


def _bags(
    idx: np.ndarray, offsets: Any, include_last_offset: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """The flat indices, the bag of each, and the number of bags."""
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "embedding_bag: offsets has to be None if input is 2D; each row is a bag"
            )
        num, per = idx.shape
        return idx.reshape(-1), np.repeat(np.arange(num), per), num
    if idx.ndim != 1:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, got {idx.ndim}D")
    if offsets is None:
        raise ValueError("embedding_bag: offsets has to be a 1D Tensor but got None")
    off = _host_ints(offsets, "embedding_bag: offsets")
    if off.ndim != 1:
        raise ValueError(f"embedding_bag: offsets has to be a 1D Tensor, got {off.ndim}D")
    if off.size and (off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > idx.size):
        raise ValueError(
            f"embedding_bag: offsets {off.tolist()} must start at 0, not decrease and stay "
            f"within the input's {idx.size} indices"
        )
    bounds = off if include_last_offset else np.append(off, idx.size)
    num = len(bounds) - 1
    seg = np.searchsorted(bounds, np.arange(idx.size), side="right") - 1
    seg = np.minimum(seg, max(num - 1, 0))  # indices past the last offset join the last bag
    return idx, seg, num


def embedding_bag(
    input: Any,
    weight: Tensor,
    offsets: Any = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Any = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """Sums, means or maxima of bags of embeddings (torch's ``F.embedding_bag``).

    Args:
        input: indices, 2-d (each row a bag) or 1-d (bags start at ``offsets``).
        weight: the table, ``(num_embeddings, embedding_dim)``.
        offsets: for a 1-d input, where each bag starts.
        max_norm, norm_type, scale_grad_by_freq: torch's options; only their defaults
            are supported here.
        mode: ``"sum"``, ``"mean"`` or ``"max"``.
        sparse: give ``weight`` a sparse gradient (not with ``"max"``).
        per_sample_weights: one weight per index, scaling its row (``"sum"`` only).
        include_last_offset: ``offsets`` has one more entry, the end of the last bag.
        padding_idx: a row that adds nothing to its bag (nor to a mean's count).

    Returns:
        ``(num_bags, embedding_dim)``; an empty bag gives zeros.

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.arange(6.0).reshape(3, 2)
        >>> tp.nn.functional.embedding_bag(tp.tensor([0, 2, 1]), w, tp.tensor([0, 2]), mode="sum")
        tensor([[4., 6.],
                [2., 3.]])
    """
    if _is_int(weight) and not _is_int(input):
        input, weight = weight, input  # torch accepts the old order (weight, input) too
    if mode not in _MODES:
        raise ValueError(f"embedding_bag: mode={mode!r} must be one of {_MODES}")
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError(
            "embedding_bag: max_norm and scale_grad_by_freq are not supported; leave them unset"
        )
    if sparse and mode == "max":
        raise ValueError("max mode does not support sparse weights")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
            f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
            "GitHub."
        )
    flat, seg, num = _bags(_host_ints(input, "embedding_bag: input"), offsets, include_last_offset)
    if per_sample_weights is not None and np.shape(per_sample_weights) != flat.shape:
        raise ValueError(
            f"embedding_bag: per_sample_weights has shape {tuple(np.shape(per_sample_weights))}, "
            f"expected {flat.shape} (one per index)"
        )
    if padding_idx is not None:
        padding_idx = int(padding_idx) % weight.shape[0]
    keep = flat != padding_idx if padding_idx is not None else np.ones(flat.shape, bool)
    if not (sparse and weight.requires_grad and is_grad_enabled()):
        return apply(_bag, weight, flat, seg, keep, per_sample_weights, num_bags=num, mode=mode)
    psw = per_sample_weights
    rows = jnp.take(weight.value, jnp.asarray(flat), axis=0)
    psw_value = (
        None if psw is None else (psw.value if isinstance(psw, Tensor) else jnp.asarray(psw))
    )

    def reduce(r: jax.Array, p: jax.Array | None) -> jax.Array:
        return _bag(r, None, jnp.asarray(seg), jnp.asarray(keep), p, num_bags=num, mode=mode)

    out, vjp = jax.vjp(reduce, rows, psw_value)

    def back(grads: tuple[Any, ...]) -> list[Any]:
        g_rows, g_psw = vjp(grads[0])
        table = _sparse_rows(g_rows, flat, keep, tuple(weight.shape))
        return [table, g_psw] if isinstance(psw, Tensor) else [table]

    inputs = [weight, psw] if isinstance(psw, Tensor) else [weight]
    return _record("EmbeddingBagBackward", out, inputs, back)
