"""Plain numpy references of the ten collectives: the oracle, independent of the package.

Each reference maps the list of per-rank inputs to the list of per-rank outputs,
written straight from the rule table's words (``tensorplay_jax.collectives.rules``) with
numpy only; nothing here reads the table or the package.
"""

from __future__ import annotations

import numpy as np

REDUCERS = {
    "sum": lambda z: z.sum(axis=0),
    "avg": lambda z: z.mean(axis=0),
    "max": lambda z: z.max(axis=0),
    "min": lambda z: z.min(axis=0),
    "prod": lambda z: z.prod(axis=0),
}


def all_reduce(xs, op="sum"):
    r = REDUCERS[op](np.stack(xs))
    return [r.copy() for _ in xs]


def broadcast(xs, src):
    return [xs[src].copy() for _ in xs]


def reduce(xs, dst, op="sum"):
    r = REDUCERS[op](np.stack(xs))
    return [r if i == dst else np.zeros_like(r) for i in range(len(xs))]


def all_gather(xs, axis=0):
    g = np.stack(xs, axis=axis)
    return [g.copy() for _ in xs]


def all_gather_single(xs, axis=0):
    g = np.concatenate(xs, axis=axis)
    return [g.copy() for _ in xs]


def gather(xs, dst, axis=0):
    g = np.stack(xs, axis=axis)
    return [g if i == dst else np.zeros_like(g) for i in range(len(xs))]


def scatter(xs, src, axis=0):
    return [np.take(xs[src], i, axis=axis) for i in range(len(xs))]


def reduce_scatter(xs, op="sum", axis=0):
    r = REDUCERS[op](np.stack(xs))  # shape of x; slice i along axis
    return [np.take(r, i, axis=axis) for i in range(len(xs))]


def all_to_all(xs, split_axis=0, concat_axis=0):
    n = len(xs)
    pieces = [np.split(x, n, axis=split_axis) for x in xs]  # pieces[j][i]: j's piece for i
    return [np.concatenate([pieces[j][i] for j in range(n)], axis=concat_axis) for i in range(n)]


def all_to_all_single(xs, sends=None, axis=0):
    """``sends[r][j]``: rows rank r sends to rank j (None: equal pieces)."""
    n = len(xs)
    if sends is None:
        k = xs[0].shape[axis] // n
        sends = [[k] * n for _ in range(n)]
    pieces = []
    for r in range(n):
        cuts = np.cumsum(sends[r])[:-1]
        pieces.append(np.split(xs[r], cuts, axis=axis))
    return [np.concatenate([pieces[j][i] for j in range(n)], axis=axis) for i in range(n)]
