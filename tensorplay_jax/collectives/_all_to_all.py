"""``all_to_all`` and ``all_to_all_single``: piece j of every rank goes to rank j.

Forward: y_i = concat_j (x_j piece i), received pieces in rank order.
Backward: the inverse exchange of the cotangents (split and concat axes swapped;
for ``all_to_all_single``, input and output split sizes swapped).

Uneven split sizes in one SPMD program: every rank runs the same program and has
the same input and output shapes, so rank r's sizes are given per rank, as a
matrix ``S[r][j]`` = rows rank r sends to rank j. Each row of ``S`` must add up to
the input length and each column to the (common) output length. The exchange pads
every piece to ``max(S)`` rows, runs one ``all_to_all`` and gathers the valid rows;
all of it is linear and JAX transposes it into the swapped exchange.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tensorplay_jax.collectives._axis import (
    axis_index,
    axis_size,
    check_axis,
    check_dim,
    to_varying,
)

SplitSizes = Sequence[int] | Sequence[Sequence[int]] | None


def all_to_all(x: Any, axis_name: Any, *, split_axis: int = 0, concat_axis: int = 0) -> Any:
    """Split ``x`` into N pieces along ``split_axis``; piece j goes to rank j.

    Args:
      x: an array or pytree of arrays; ``x.shape[split_axis]`` divisible by N.
      axis_name: the mapped axis (N ranks).
      split_axis: the axis to split into N equal pieces (default 0).
      concat_axis: the axis along which the received pieces are concatenated in rank
        order (default 0).

    Returns:
      With the defaults and ``x`` of shape ``(N, ...)``: ``y_i[j] = x_j[i]``. Gradient:
      the inverse all-to-all of the cotangent.

    Raises:
      ValueError: ``axis_name`` is not bound, an axis is out of range, or
        ``x.shape[split_axis]`` is not divisible by N.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import all_to_all, spmd
      >>> f = spmd.on_ranks(lambda x: all_to_all(x, "i"))
      >>> f(jnp.arange(16.0).reshape(4, 4))
      Array([[ 0.,  4.,  8., 12.],
             [ 1.,  5.,  9., 13.],
             [ 2.,  6., 10., 14.],
             [ 3.,  7., 11., 15.]], dtype=float32)
    """
    n = axis_size("all_to_all", axis_name)
    return jax.tree.map(
        partial(
            _all_to_all, axis_name=axis_name, split_axis=split_axis, concat_axis=concat_axis, n=n
        ),
        x,
    )


def _all_to_all(
    x: jax.Array, *, axis_name: Any, split_axis: int, concat_axis: int, n: int
) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim == 0:
        raise ValueError("all_to_all: x is 0-d; it needs an axis to split into N pieces.")
    split_axis = check_axis("all_to_all", "split_axis", split_axis, x.ndim)
    concat_axis = check_axis("all_to_all", "concat_axis", concat_axis, x.ndim)
    check_dim("all_to_all", x, split_axis, n, exact=False)
    return lax.all_to_all(to_varying(x, axis_name), axis_name, split_axis, concat_axis, tiled=True)


def all_to_all_single(
    x: Any,
    axis_name: Any,
    output_split_sizes: SplitSizes = None,
    input_split_sizes: SplitSizes = None,
    *,
    axis: int = 0,
) -> Any:
    """Split ``x``'s rows, send piece j to rank j, concatenate what arrives.

    Args:
      x: an array (rank >= 1) or pytree of arrays, ``M`` rows along ``axis``.
      axis_name: the mapped axis (N ranks).
      output_split_sizes: rows received from each rank. Either N ints (the same on
        every rank) or, for sizes that differ by rank, N lists of N ints:
        ``output_split_sizes[r][j]`` = rows rank r receives from rank j.
      input_split_sizes: rows sent to each rank, in the same two forms:
        ``input_split_sizes[r][j]`` = rows rank r sends to rank j. Default: equal
        pieces, ``M / N`` each. When both are given they must agree
        (``output[r][j] == input[j][r]``); when one is given the other follows.
      axis: the axis that holds the rows (default 0).

    Returns:
      The received pieces concatenated in rank order along ``axis``. Gradient: the
      exchange run backwards, input and output split sizes swapped.

    Raises:
      ValueError: ``axis_name`` is not bound, ``M`` is not divisible by N (equal
        splits), or the split sizes have the wrong length, do not add up to ``M``, give
        ranks different output lengths, or disagree with each other.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import all_to_all_single, spmd
      >>> sizes = [[1, 3], [3, 1]]  # rank 0 sends 1 row to itself and 3 to rank 1, ...
      >>> f = spmd.on_ranks(lambda x: all_to_all_single(x, "i", input_split_sizes=sizes), n=2)
      >>> f(jnp.arange(8.0).reshape(2, 4))
      Array([[0., 4., 5., 6.],
             [1., 2., 3., 7.]], dtype=float32)
    """
    n = axis_size("all_to_all_single", axis_name)
    return jax.tree.map(
        partial(
            _all_to_all_single,
            axis_name=axis_name,
            n=n,
            output_split_sizes=output_split_sizes,
            input_split_sizes=input_split_sizes,
            axis=axis,
        ),
        x,
    )


def _all_to_all_single(
    x: jax.Array,
    *,
    axis_name: Any,
    n: int,
    output_split_sizes: SplitSizes,
    input_split_sizes: SplitSizes,
    axis: int,
) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim == 0:
        raise ValueError("all_to_all_single: x is 0-d; it needs an axis of rows to split.")
    axis = check_axis("all_to_all_single", "axis", axis, x.ndim)
    sends = split_matrix(n, x.shape[axis], output_split_sizes, input_split_sizes)
    x = to_varying(x, axis_name)
    if sends is None:
        return lax.all_to_all(x, axis_name, axis, axis, tiled=True)
    return jnp.moveaxis(_uneven_exchange(jnp.moveaxis(x, axis, 0), sends, axis_name), 0, axis)


def _uneven_exchange(x: jax.Array, sends: np.ndarray, axis_name: Any) -> jax.Array:
    """Exchange rows of ``x`` (rows on axis 0) by the static send matrix ``sends``."""
    n = sends.shape[0]
    pad = int(sends.max())
    rank = axis_index(axis_name)
    # Send side: row k of the padded piece for rank j is x[offset_j + k], or padding.
    src_rows = np.zeros((n, n * pad), np.int32)
    valid = np.zeros((n, n * pad), bool)
    for r in range(n):
        offsets = np.concatenate([[0], np.cumsum(sends[r])[:-1]])
        for j in range(n):
            k = np.arange(sends[r, j])
            src_rows[r, j * pad + k] = offsets[j] + k
            valid[r, j * pad + k] = True
    rows = jnp.asarray(src_rows)[rank]
    mask = jnp.asarray(valid)[rank].reshape((-1,) + (1,) * (x.ndim - 1))
    padded = jnp.where(mask, jnp.take(x, rows, axis=0), jnp.zeros((), x.dtype))
    received = lax.all_to_all(padded, axis_name, 0, 0, tiled=True)
    # Receive side: keep the first sends[j, i] rows of the block from each rank j.
    out_rows = np.stack(
        [
            np.concatenate([j * pad + np.arange(sends[j, i]) for j in range(n)]).astype(np.int32)
            for i in range(n)
        ]
    )
    return jnp.take(received, jnp.asarray(out_rows)[rank], axis=0)


def _as_matrix(n: int, sizes: Any, arg: str) -> np.ndarray:
    """Sizes as given (N ints, or N lists of N ints) -> an (N, N) int matrix by rank."""
    fn = "all_to_all_single"
    try:
        rows = list(sizes)
    except TypeError:
        raise TypeError(
            f"{fn}: {arg} must be a list of {n} ints or {n} lists of {n} ints, got {sizes!r}."
        ) from None
    if len(rows) != n:
        raise ValueError(
            f"{fn}: {arg} has {len(rows)} entries, expected one per rank ({n}); got {sizes!r}."
        )
    per_rank = bool(rows) and all(isinstance(r, (list, tuple, np.ndarray)) for r in rows)
    try:
        if per_rank:
            if any(len(r) != n for r in rows):
                raise ValueError(
                    f"{fn}: {arg} per rank must be {n} lists of {n} ints; got {sizes!r}."
                )
            m = np.array([[operator.index(v) for v in r] for r in rows], dtype=np.int64)
        else:
            m = np.tile(np.array([operator.index(v) for v in rows], np.int64), (n, 1))
    except TypeError:
        raise TypeError(f"{fn}: {arg} must hold static Python ints, got {sizes!r}.") from None
    if (m < 0).any():
        raise ValueError(f"{fn}: {arg} must be non-negative, got {sizes!r}.")
    return m


def split_matrix(
    n: int, rows: int, output_split_sizes: SplitSizes, input_split_sizes: SplitSizes
) -> np.ndarray | None:
    """The (N, N) send matrix ``S[r][j]``, or None for equal pieces (validated)."""
    fn = "all_to_all_single"
    if input_split_sizes is None and output_split_sizes is None:
        if rows % n:
            raise ValueError(
                f"{fn}: x has {rows} rows, not divisible by the axis size {n}; pass "
                "input_split_sizes for uneven pieces."
            )
        return None
    sends = recv_sends = None
    if input_split_sizes is not None:
        sends = _as_matrix(n, input_split_sizes, "input_split_sizes")
    if output_split_sizes is not None:
        recv_sends = _as_matrix(n, output_split_sizes, "output_split_sizes").T
    if sends is not None and recv_sends is not None and not np.array_equal(sends, recv_sends):
        raise ValueError(
            f"{fn}: output_split_sizes={output_split_sizes!r} do not match "
            f"input_split_sizes={input_split_sizes!r}: rank r must receive from rank j "
            "exactly what j sends to r (output[r][j] == input[j][r])."
        )
    sends = sends if sends is not None else recv_sends
    row_sums = sends.sum(axis=1)
    if (row_sums != rows).any():
        which, given = (
            ("input_split_sizes", input_split_sizes)
            if input_split_sizes is not None
            else ("output_split_sizes", output_split_sizes)
        )
        raise ValueError(
            f"{fn}: the split sizes do not add up to x's {rows} rows (ranks send "
            f"{row_sums.tolist()}); check {which}={given!r}."
        )
    col_sums = sends.sum(axis=0)
    if (col_sums != col_sums[0]).any():
        raise ValueError(
            f"{fn}: ranks would receive {col_sums.tolist()} rows; in one SPMD program every "
            "rank's output has the same shape, so every rank must receive the same number "
            "of rows. For sizes that differ by rank pass N lists (input_split_sizes[r] = "
            "what rank r sends)."
        )
    if (sends == rows // n).all() and rows % n == 0:
        return None
    return sends
