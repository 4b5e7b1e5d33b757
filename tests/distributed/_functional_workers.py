"""Worker code for the ``distributed.nn.functional`` tests: each function runs in every rank.

Every rank knows every rank's input (``inputs``) and writes its results to the folder
given as ``sys.argv[1]``.
"""

from __future__ import annotations

import os
import sys
from functools import partial

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
import tensorplay_jax.distributed.nn.functional as df
from tests._worker import rank_and_world_size
from tests.collectives import _reference as R


def inputs(k, shape):
    return 1.0 + k + 0.1 * np.random.default_rng(100 + k).standard_normal(shape)


def sends(n):  # rank k sends j + k + 1 rows to rank j
    return [[j + k + 1 for j in range(n)] for k in range(n)]


def _setup() -> tuple[int, int, str]:
    """``(world size, rank, output folder)``."""
    r, n = rank_and_world_size()
    return n, r, sys.argv[1]


def ours() -> None:
    n, r, out_dir = _setup()

    dist.init_process_group("gloo", timeout=60)
    S = sends(n)
    CASES = {
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

    def loss64(xs, ref):
        return sum(np.sin(y).sum() for y in ref(xs))

    results = {}
    for name, (shape, ours, ref) in CASES.items():
        xs = [inputs(k, shape if shape else (sum(S[k]), 2)) for k in range(n)]
        x = tp.tensor(xs[r].astype(np.float32), requires_grad=True)
        y = ours(x)
        np.testing.assert_allclose(y.numpy(), ref(xs)[r], rtol=1e-5, atol=1e-5, err_msg=name)
        tp.sin(y).sum().backward()
        # Finite differences of the whole multi-rank loss with respect to this rank's input.
        h, want = 1e-6, np.zeros_like(xs[r])
        for i in np.ndindex(xs[r].shape):
            up = [a.copy() for a in xs]
            dn = [a.copy() for a in xs]
            up[r][i] += h
            dn[r][i] -= h
            want[i] = (loss64(up, ref) - loss64(dn, ref)) / (2 * h)
        got = np.asarray(x.grad.numpy(), np.float64)
        np.testing.assert_allclose(
            got, want, rtol=2e-4, atol=2e-4, err_msg=f"{name} grad, rank {r}"
        )
        results[name] = got
    np.savez(os.path.join(out_dir, f"ours-{r}.npz"), **results)
    print(f"rank {r}: {len(results)} functions OK")
    dist.destroy_process_group()


def torch_reference() -> None:
    """The same cases through ``torch.distributed.nn.functional`` on gloo (torch installed)."""
    n, r, out_dir = _setup()
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


def list_forms() -> None:
    """tensorplay's list forms: lists in (``scatter``, ``all_to_all``, ``reduce_scatter``),
    tuples out (``all_to_all``; ``gather``/``all_gather`` unpack), each list element's
    gradient against finite differences of the whole multi-rank loss."""
    n, r, _ = _setup()
    dist.init_process_group("gloo", timeout=60)

    def exchanged(xs):  # rank i gets piece i of every rank's list
        return [[xs[j][i] for j in range(n)] for i in range(n)]

    # name: (shapes of rank k's list, ours(list of Tensors) -> outputs, numpy reference)
    CASES = {
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
        "all_to_all-list": (lambda k: [(3,)] * n, lambda ts: df.all_to_all(ts), exchanged),
        "all_to_all-lists": (
            lambda k: [(2, 3)] * n,
            lambda ts: df.all_to_all([tp.zeros(2, 3) for _ in range(n)], ts),
            exchanged,
        ),
        "all_to_all-lists-uneven": (  # rank k sends rank j a (j + k + 1, 2) piece
            lambda k: [(j + k + 1, 2) for j in range(n)],
            lambda ts: df.all_to_all([tp.zeros(r + j + 1, 2) for j in range(n)], ts),
            exchanged,
        ),
        "reduce_scatter-list": (
            lambda k: [(3,)] * n,
            lambda ts: [df.reduce_scatter(ts)],
            lambda xs: [[sum(xs[k][i] for k in range(n))] for i in range(n)],
        ),
    }

    def loss64(xs, ref):
        return sum(np.sin(y).sum() for ys in ref(xs) for y in ys)

    for name, (shapes, ours, ref) in CASES.items():
        xs = [[inputs(10 * k + i, s) for i, s in enumerate(shapes(k))] for k in range(n)]
        ts = [tp.tensor(a.astype(np.float32), requires_grad=True) for a in xs[r]]
        ys = ours(ts)
        if name.startswith("all_to_all"):
            assert isinstance(ys, tuple), (name, type(ys))
        want = ref(xs)[r]
        assert len(ys) == len(want), (name, len(ys), len(want))
        for y, w in zip(ys, want, strict=True):
            np.testing.assert_allclose(y.numpy(), w, rtol=1e-5, atol=1e-5, err_msg=name)
        sum(tp.sin(y).sum() for y in ys).backward()
        for i, t in enumerate(ts):  # every list element's gradient, by finite differences
            h, g = 1e-6, np.zeros_like(xs[r][i])
            for e in np.ndindex(g.shape):
                up = [[a.copy() for a in x] for x in xs]
                dn = [[a.copy() for a in x] for x in xs]
                up[r][i][e] += h
                dn[r][i][e] -= h
                g[e] = (loss64(up, ref) - loss64(dn, ref)) / (2 * h)
            got = np.asarray(t.grad.numpy(), np.float64)
            np.testing.assert_allclose(got, g, rtol=2e-4, atol=2e-4, err_msg=f"{name}[{i}] grad")

    # Errors name the function and the argument; raised before any rank communicates.
    for call, words in [
        (lambda: df.all_to_all([tp.zeros(3)] * (n + 1)), "holds 3 tensors but the group has 2"),
        (lambda: df.scatter(None, r), "tensors=None on src"),
        (lambda: df.all_to_all([tp.zeros(2)] * (n - 1) + [tp.zeros(3)]), "differ in shape"),
    ]:
        try:
            call()
        except (ValueError, TypeError) as e:
            assert words.replace("3 tensors", f"{n + 1} tensors").replace(
                "has 2", f"has {n}"
            ) in str(e), e
        else:
            raise AssertionError(f"no error: {words}")
    print(f"rank {r}: {len(CASES)} list forms OK")
    dist.destroy_process_group()
