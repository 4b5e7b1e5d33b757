"""Worker code for the ``distributed.nn.functional`` tests, and the cases' numpy references.

The test process (RPC rank 0) drives a job whose other workers form a gloo process
group (group rank = RPC rank - 1); it runs one case on every member at once
(``Workers.run_all``; rank 0 answers None) and compares what they return with the
references here. Every rank's input is known to all (``inputs``), so the test can
build the whole multi-rank loss. ``torch_reference`` runs in its own processes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
import tensorplay_jax.distributed.nn.functional as df
from tensorplay_jax.distributed import rpc
from tests._worker import rank_and_world_size
from tests.collectives import _reference as R


def inputs(k, shape):
    return 1.0 + k + 0.1 * np.random.default_rng(100 + k).standard_normal(shape)


def sends(n):  # rank k sends j + k + 1 rows to rank j
    return [[j + k + 1 for j in range(n)] for k in range(n)]


# ------------------------------------------------------------------ the group
def _member() -> bool:
    """Whether this worker is in the process group (every worker but the test process)."""
    return rpc.get_worker_info().id != 0


def init_group(port: int, n: int) -> int | None:
    """Join the gloo group of ``n`` members as RPC rank - 1; the group rank (None on rank 0)."""
    if not _member():
        return None
    me = rpc.get_worker_info().id - 1
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=me, world_size=n, timeout=60
    )
    return dist.get_rank()


def destroy_group() -> None:
    if _member():
        dist.destroy_process_group()


# ------------------------------------------------------------------ single-tensor cases
def cases(n: int, r: int) -> dict[str, tuple[Any, Callable, Callable]]:
    """``name: (input shape or None for the uneven sends, ours(x) on rank r, numpy reference)``."""
    S = sends(n)
    return {
        "all_reduce-sum": ((3, 2), lambda x: df.all_reduce(x), R.all_reduce),
        "all_reduce-avg": (
            (3, 2),
            lambda x: df.all_reduce(x, "avg"),
            partial(R.all_reduce, op="avg"),
        ),
        "all_reduce-max": (
            (3, 2),
            lambda x: df.all_reduce(x, "max"),
            partial(R.all_reduce, op="max"),
        ),
        "all_reduce-min": (
            (3, 2),
            lambda x: df.all_reduce(x, "min"),
            partial(R.all_reduce, op="min"),
        ),
        "all_reduce-prod": (
            (3, 2),
            lambda x: df.all_reduce(x, "prod"),
            partial(R.all_reduce, op="prod"),
        ),
        "broadcast": ((3, 2), lambda x: df.broadcast(x, n - 1), partial(R.broadcast, src=n - 1)),
        "reduce-sum": ((3, 2), lambda x: df.reduce(x, 1), partial(R.reduce, dst=1)),
        "reduce-max": (
            (3, 2),
            lambda x: df.reduce(x, 0, "max"),
            partial(R.reduce, dst=0, op="max"),
        ),
        "gather": ((2, 3), lambda x: df.gather(x, 1), partial(R.gather, dst=1)),
        "scatter": ((n, 3), lambda x: df.scatter(x, 0), partial(R.scatter, src=0)),
        "reduce_scatter-sum": ((n, 3), lambda x: df.reduce_scatter(x), R.reduce_scatter),
        "reduce_scatter-max": (
            (n, 3),
            lambda x: df.reduce_scatter(x, "max"),
            partial(R.reduce_scatter, op="max"),
        ),
        "reduce_scatter-prod": (
            (n, 3),
            lambda x: df.reduce_scatter(x, "prod"),
            partial(R.reduce_scatter, op="prod"),
        ),
        "all_gather": ((2, 3), lambda x: df.all_gather(x), R.all_gather),
        "all_gather_single": ((2, 3), lambda x: df.all_gather_single(x), R.all_gather_single),
        "all_to_all": ((n, 3), lambda x: df.all_to_all(x), R.all_to_all),
        "all_to_all_single": ((2 * n, 3), lambda x: df.all_to_all_single(x), R.all_to_all_single),
        "all_to_all_single-uneven": (
            None,
            lambda x: df.all_to_all_single(x, [S[j][r] for j in range(n)], S[r]),
            partial(R.all_to_all_single, sends=S),
        ),
    }


CASE_NAMES = list(cases(2, 0))


def case_inputs(name: str, n: int) -> list[np.ndarray]:
    """Every rank's float64 input of case ``name`` in a group of ``n``."""
    shape = cases(n, 0)[name][0]
    return [inputs(k, shape if shape else (sum(sends(n)[k]), 2)) for k in range(n)]


def run_case(name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """On a member: ``(output, gradient of sum(sin(output)) w.r.t. this rank's input)``."""
    if not _member():
        return None
    r, n = dist.get_rank(), dist.get_world_size()
    x = tp.tensor(case_inputs(name, n)[r].astype(np.float32), requires_grad=True)
    y = cases(n, r)[name][1](x)
    tp.sin(y).sum().backward()
    return y.numpy(), x.grad.numpy()


# ------------------------------------------------------------------ list forms
def _exchanged(xs, n):  # rank i gets piece i of every rank's list
    return [[xs[j][i] for j in range(n)] for i in range(n)]


def list_cases(n: int, r: int) -> dict[str, tuple[Callable, Callable, Callable]]:
    """tensorplay's list forms: lists in (``scatter``, ``all_to_all``, ``reduce_scatter``),
    tuples out (``all_to_all``; ``gather``/``all_gather`` unpack).

    ``name: (shapes of rank k's list, ours(list of Tensors) -> outputs, numpy reference)``.
    """
    return {
        "all_gather-unpacked": (
            lambda k: [(2, 3)],
            lambda ts: list(df.all_gather(ts[0])),
            lambda xs: [[x[0] for x in xs]] * n,
        ),
        "all_gather-cat": (
            lambda k: [(2, 3)],
            lambda ts: [tp.cat(df.all_gather(ts[0]), dim=1)],
            lambda xs: [[np.concatenate([x[0] for x in xs], axis=1)]] * n,
        ),
        "gather-unpacked": (
            lambda k: [(2, 3)],
            lambda ts: [*df.gather(ts[0], 1)],
            lambda xs: [[x[0] * (i == 1) for x in xs] for i in range(n)],
        ),
        "scatter-list": (
            lambda k: [(3,)] * n,
            lambda ts: [df.scatter(ts, n - 1)],
            lambda xs: [[xs[n - 1][i]] for i in range(n)],
        ),
        "scatter-none-on-receivers": (
            lambda k: [(2, 3)] * n if k == 0 else [],
            lambda ts: [df.scatter(ts or None, 0)],
            lambda xs: [[xs[0][i]] for i in range(n)],
        ),
        "all_to_all-list": (
            lambda k: [(3,)] * n,
            lambda ts: df.all_to_all(ts),
            lambda xs: _exchanged(xs, n),
        ),
        "all_to_all-lists": (
            lambda k: [(2, 3)] * n,
            lambda ts: df.all_to_all([tp.zeros(2, 3) for _ in range(n)], ts),
            lambda xs: _exchanged(xs, n),
        ),
        "all_to_all-lists-uneven": (  # rank k sends rank j a (j + k + 1, 2) piece
            lambda k: [(j + k + 1, 2) for j in range(n)],
            lambda ts: df.all_to_all([tp.zeros(r + j + 1, 2) for j in range(n)], ts),
            lambda xs: _exchanged(xs, n),
        ),
        "reduce_scatter-list": (
            lambda k: [(3,)] * n,
            lambda ts: [df.reduce_scatter(ts)],
            lambda xs: [[sum(xs[k][i] for k in range(n))] for i in range(n)],
        ),
    }


LIST_CASE_NAMES = list(list_cases(2, 0))


def list_case_inputs(name: str, n: int) -> list[list[np.ndarray]]:
    """Every rank's list of float64 inputs of list case ``name`` in a group of ``n``."""
    shapes = list_cases(n, 0)[name][0]
    return [[inputs(10 * k + i, s) for i, s in enumerate(shapes(k))] for k in range(n)]


def run_list_case(name: str) -> tuple[str, list[np.ndarray], list[np.ndarray]] | None:
    """On a member: ``(type of the outputs, outputs, gradient of every list element)``."""
    if not _member():
        return None
    r, n = dist.get_rank(), dist.get_world_size()
    ts = [tp.tensor(a.astype(np.float32), requires_grad=True) for a in list_case_inputs(name, n)[r]]
    ys = list_cases(n, r)[name][1](ts)
    sum(tp.sin(y).sum() for y in ys).backward()
    return type(ys).__name__, [y.numpy() for y in ys], [t.grad.numpy() for t in ts]


def list_form_error(which: str) -> str | None:
    """On a member: the message of the error a bad list-form call raises (before any rank
    communicates), or ``"no error"``."""
    if not _member():
        return None
    r, n = dist.get_rank(), dist.get_world_size()
    call = {
        "too-many-tensors": lambda: df.all_to_all([tp.zeros(3)] * (n + 1)),
        "scatter-none-on-src": lambda: df.scatter(None, r),
        "shapes-differ": lambda: df.all_to_all([tp.zeros(2)] * (n - 1) + [tp.zeros(3)]),
    }[which]
    try:
        call()
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


# ------------------------------------------------------------------ torch, in its own job
def torch_reference() -> None:
    """The same cases through ``torch.distributed.nn.functional`` on gloo (torch installed);
    every rank writes its gradients to ``torch-{rank}.npz`` in the folder ``sys.argv[1]``."""
    r, n = rank_and_world_size()
    out_dir = sys.argv[1]
    import torch
    import torch.distributed as tdist
    import torch.distributed.nn.functional as tf

    tdist.init_process_group("gloo", rank=r, world_size=n)
    S = sends(n)

    def t(a):
        return torch.tensor(a, dtype=torch.float32, requires_grad=True)

    CASES = {
        "all_reduce-sum": ((3, 2), lambda x: tf.all_reduce(x)),
        "broadcast": ((3, 2), lambda x: tf.broadcast(x, n - 1)),
        "all_gather": ((2, 3), lambda x: torch.stack(tf.all_gather(x))),
        "scatter": ((n, 3), lambda x: tf.scatter(list(x.unbind(0)), src=0)),
        "reduce_scatter-sum": (
            (n, 3),
            lambda x: tf.reduce_scatter(torch.zeros(3), list(x.unbind(0))),
        ),
        "all_to_all": (
            (n, 3),
            lambda x: torch.stack(
                tf.all_to_all([torch.zeros(3) for _ in range(n)], list(x.unbind(0)))
            ),
        ),
        "all_to_all_single": ((2 * n, 3), lambda x: tf.all_to_all_single(torch.zeros(2 * n, 3), x)),
        "all_to_all_single-uneven": (
            None,
            lambda x: tf.all_to_all_single(
                torch.zeros(sum(S[j][r] for j in range(n)), 2), x, [S[j][r] for j in range(n)], S[r]
            ),
        ),
    }
    results = {}
    for name, (shape, fn) in CASES.items():
        x = t(inputs(r, shape if shape else (sum(S[r]), 2)))
        torch.sin(fn(x)).sum().backward()
        results[name] = x.grad.double().numpy()
    np.savez(os.path.join(out_dir, f"torch-{r}.npz"), **results)
    tdist.destroy_process_group()
