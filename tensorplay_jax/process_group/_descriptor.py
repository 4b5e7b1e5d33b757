"""Per-call descriptors: what each rank is about to do, compared across ranks before any data moves.

Every collective first publishes a fixed-length int64 vector (which collective,
dtype, shape, root, reduction, split sizes). Each engine exchanges these vectors
(the shared-memory engine in its control block, the XLA engine through the
coordination service) and every rank runs :func:`check` on the same vectors, so
all ranks reach the same verdict and raise the same error together instead of
some of them waiting for data that never comes.
"""

from __future__ import annotations

import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp
from tensorplay_jax.process_group.engine import OPS as ENGINE_OPS
from tensorplay_jax.runtime.settings import PG_MAX_NDIM

__all__ = ["OPS", "check", "decode", "dtype_of", "encode", "length"]

# Collectives, in a fixed order: the index is the wire code. The engines' collectives
# (the ``Engine`` protocol's order), then the point-to-point pair.
OPS = (*ENGINE_OPS, "send/recv")
REDUCE_OPS = tuple(ReduceOp)  # the index is the wire code
_DTYPES = tuple(
    np.dtype(d)
    for d in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)
try:  # JAX's extra floating types live in ml_dtypes, which jax depends on.
    import ml_dtypes

    _DTYPES = (*_DTYPES, np.dtype(ml_dtypes.bfloat16))
except ImportError:  # pragma: no cover
    pass

# Layout: [op, dtype, reduce_op, root, ndim, shape * MAX_NDIM, in_splits * n, out_splits * n]
_HEAD = 5


def length(n: int) -> int:
    """Length of a descriptor in a group of ``n`` ranks."""
    return _HEAD + PG_MAX_NDIM + 2 * n


def dtype_code(fn: str, dtype: np.dtype) -> int:
    """The wire code of ``dtype``, or a TypeError naming the supported ones."""
    try:
        return _DTYPES.index(np.dtype(dtype))
    except ValueError:
        names = ", ".join(str(d) for d in _DTYPES)
        raise TypeError(f"{fn}: dtype {dtype} is not supported; use one of {names}.") from None


def dtype_of(code: int) -> np.dtype:
    """The dtype for a wire code."""
    return _DTYPES[code]


def encode(
    n: int,
    op: str,
    dtype_c: int,
    shape: tuple[int, ...],
    *,
    root: int = -1,
    reduce_op: ReduceOp | None = None,
    in_splits: tuple[int, ...] | None = None,
    out_splits: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Build the int64 descriptor of one call (``root`` is a group index)."""
    d = np.full(length(n), -1, np.int64)
    d[0] = OPS.index(op)
    d[1] = dtype_c
    d[2] = -1 if reduce_op is None else REDUCE_OPS.index(reduce_op)
    d[3] = root
    d[4] = len(shape)
    d[_HEAD : _HEAD + len(shape)] = shape
    base = _HEAD + PG_MAX_NDIM
    if in_splits is not None:
        d[base : base + n] = in_splits
    if out_splits is not None:
        d[base + n : base + 2 * n] = out_splits
    return d


def decode(d: np.ndarray, n: int) -> dict:
    """The fields of a descriptor, as Python values (``?`` for a code that names nothing)."""
    ndim = int(d[4])
    base = _HEAD + PG_MAX_NDIM
    return {
        "op": OPS[int(d[0])] if 0 <= d[0] < len(OPS) else "?",
        "dtype": _DTYPES[int(d[1])] if 0 <= d[1] < len(_DTYPES) else "?",
        "reduce_op": None if d[2] < 0 else REDUCE_OPS[int(d[2])] if d[2] < len(REDUCE_OPS) else "?",
        "root": int(d[3]),
        "shape": tuple(int(s) for s in d[_HEAD : _HEAD + ndim]),
        "in_splits": tuple(int(s) for s in d[base : base + n]),
        "out_splits": tuple(int(s) for s in d[base + n : base + 2 * n]),
    }


_POISON = 99  # op code of a rank that refuses the call (an earlier one-sided call failed)


def poisoned(d: np.ndarray) -> np.ndarray:
    """``d`` marked so that every rank that reads it raises instead of running the call."""
    d = d.copy()
    d[0] = _POISON
    return d


def _member(ranks: tuple[int, ...], index: int) -> int | str:
    """The global rank of group index ``index`` (a descriptor's root), or ``?`` if none is."""
    return ranks[index] if 0 <= index < len(ranks) else f"? (group index {index})"


def check(fn: str, descs: np.ndarray, ranks: tuple[int, ...]) -> str | None:
    """Compare every rank's descriptor; return the error message, or None when they agree.

    Args:
      fn: the collective this rank called (named first in the message).
      descs: ``(n, length(n))`` descriptors, row i from group member ``ranks[i]``.
      ranks: global ranks of the group members.

    Whatever the rows hold (another rank publishes them), the verdict is a message or
    None, never an exception.
    """
    n = len(ranks)
    if descs[0][0] != OPS.index("all_to_all_single") and bool((descs == descs[0]).all()):
        return None  # identical calls everywhere (the common case, decided in microseconds)
    bad = [ranks[i] for i in range(n) if descs[i][0] == _POISON]
    if bad:
        return (
            f"{fn}: not run, because an earlier call that rank(s) {bad} made as src did not "
            "match the other ranks (see the error on those ranks)."
        )
    rows = [decode(descs[i], n) for i in range(n)]

    def by_rank(field):
        return ", ".join(f"rank {ranks[i]}: {rows[i][field]}" for i in range(n))

    for field, what in (("op", "collective"), ("reduce_op", "op"), ("root", "root")):
        if len({r[field] for r in rows}) > 1:
            if field == "root":
                return (
                    f"{fn}: ranks disagree on src/dst ("
                    + ", ".join(
                        f"rank {ranks[i]}: {_member(ranks, rows[i]['root'])}" for i in range(n)
                    )
                    + "); every rank must pass the same src/dst."
                )
            return (
                f"{fn}: ranks called different {what}s ({by_rank(field)}); every rank "
                "of the group must make the same calls in the same order."
            )
    if len({str(r["dtype"]) for r in rows}) > 1:
        return f"{fn}: dtype mismatch across ranks ({by_rank('dtype')}); cast to one dtype."
    op = rows[0]["op"]
    if op == "all_to_all_single":
        if len({r["shape"][1:] for r in rows}) > 1:
            return (
                f"{fn}: shape mismatch across ranks beyond dim 0 ({by_rank('shape')}); "
                "rows may differ in number only."
            )
        for i in range(n):
            expect = tuple(rows[j]["in_splits"][i] for j in range(n))
            if rows[i]["out_splits"] != expect:
                return (
                    f"{fn}: output_split_sizes={list(rows[i]['out_splits'])} on rank "
                    f"{ranks[i]} does not match what the others send it: {list(expect)} "
                    "(input_split_sizes[that rank] on each rank)."
                )
        return None
    if len({r["shape"] for r in rows}) > 1:
        return (
            f"{fn}: shape mismatch across ranks ({by_rank('shape')}); every rank must "
            "pass an array of the same shape."
        )
    return None
