"""Inputs and numpy answers of the process-group value checks, keyed as the workers key results.

Numpy only (no tensorplay): ``_pg_workers.values`` builds its inputs here and hands
back what each collective returned under a key such as ``"broadcast/float32(3, 5)/src1"``;
:func:`expected` gives, for the same key, the numpy answer and its tolerance.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def inputs(k: int, shape: tuple[int, ...] = (3, 5), dtype=np.float32) -> np.ndarray:
    """Rank ``k``'s input: small integers, exact in every dtype used."""
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + k + 1).astype(dtype)


def cases(n: int, engine: str) -> list[tuple[object, tuple[int, ...], tuple[int, ...]]]:
    """``(dtype, shape, scatter shape)`` for ``engine``.

    Small inputs take the shared-memory engine's one-meeting path, the (600, 500) ones
    its slots (and the tcp engine's larger frames). The xla engine has no path that
    depends on size (one compiled program per shape), so it runs the small ones only:
    each shape there costs a compilation per collective and root.
    """
    small = [
        (np.float32, (3, 5), (n, 2, 3)),
        (np.int32, (3, 5), (n, 2, 3)),
        (ml_dtypes.bfloat16, (3, 5), (n, 2, 3)),
    ]
    return small if engine == "xla" else [*small, (np.float32, (600, 500), (n, 600, 500))]


def tag(dtype: object, shape: tuple[int, ...]) -> str:
    """The key part naming one case, e.g. ``"bfloat16(3, 5)"``."""
    return f"{np.dtype(dtype).name}{shape}"


def reduce_ops(dtype: object) -> list[str]:
    """The ``op=`` strings checked for ``dtype`` (no average of integers)."""
    return ["sum", "max", "min", "prod"] + ([] if dtype == np.int32 else ["avg"])


def scatter_inputs(n: int, sshape: tuple[int, ...], dtype: object) -> list[np.ndarray]:
    """Every rank's ``(N, ...)`` input: row ``j`` is meant for rank ``j``."""
    return [inputs(k, shape=sshape, dtype=dtype) * (k + 2) for k in range(n)]


def split_sizes(n: int) -> list[list[int]]:
    """``all_to_all_single``'s uneven splits: rank ``k`` sends ``j + k + 1`` rows to rank ``j``."""
    return [[j + k + 1 for j in range(n)] for k in range(n)]


def split_inputs(n: int, width: int, scale: int) -> list[np.ndarray]:
    """Every rank's uneven ``all_to_all_single`` input, rows of ``width``."""
    ins = split_sizes(n)
    return [
        np.arange(sum(ins[k]) * width, dtype=np.float32).reshape(-1, width) + scale * k
        for k in range(n)
    ]


def p2p_payload(k: int) -> np.ndarray:
    """What rank ``k`` sends its ring neighbour."""
    return np.full((4, 2), 10.0 * k + 1, np.float32)


BIG = 3 << 20  # floats: larger than the first shared-memory slot
SUBGROUP_SHAPE = (600, 500)  # the subgroup's collectives take the slots too


def _uneven(a: list[np.ndarray], r: int) -> np.ndarray:
    ins = split_sizes(len(a))
    return np.concatenate(
        [a[j][sum(ins[j][:r]) : sum(ins[j][:r]) + ins[j][r]] for j in range(len(a))]
    )


def expected(n: int, r: int, engine: str) -> dict[str, tuple[np.ndarray, float]]:
    """``{key: (numpy answer, rtol)}`` of rank ``r`` in a world of ``n`` on ``engine``."""
    want: dict[str, tuple[np.ndarray, float]] = {}
    for dtype, shape, sshape in cases(n, engine):
        t = tag(dtype, shape)
        xs = [inputs(k, shape, dtype) for k in range(n)]
        stack = np.stack(xs)
        answers = {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0)}
        answers |= {"prod": stack.prod(0), "avg": stack.astype(np.float64).mean(0)}
        tol = 2e-2 if dtype == ml_dtypes.bfloat16 else 1e-6
        for op in reduce_ops(dtype):
            want[f"all_reduce/{t}/{op}"] = (answers[op], tol)
        want[f"all_reduce/{t}/ReduceOp.MAX"] = (stack.max(0), 1e-7)
        for root in range(n):
            want[f"broadcast/{t}/src{root}"] = (xs[root], 1e-7)
            mine = root == r
            want[f"reduce/{t}/dst{root}"] = (stack.sum(0) if mine else np.zeros_like(xs[0]), 1e-7)
            want[f"gather/{t}/dst{root}"] = (stack if mine else np.zeros_like(stack), 1e-7)
        want[f"all_gather/{t}"] = (stack, 1e-7)
        ss = scatter_inputs(n, sshape, dtype)
        for root in range(n):
            want[f"scatter/{t}/src{root}"] = (ss[root][r], 1e-7)
        want[f"reduce_scatter/{t}/sum"] = (sum(s.astype(np.float64) for s in ss)[r], 2e-2)
        want[f"reduce_scatter/{t}/max"] = (np.max(np.stack(ss), 0)[r], 1e-7)
        want[f"all_to_all/{t}"] = (np.stack([ss[j][r] for j in range(n)]), 1e-7)
    want["scalar/all_reduce"] = (np.asarray(sum(range(1, n + 1))), 1e-7)
    want["scalar/broadcast"] = (np.asarray((n - 1) * 10), 1e-7)
    want["empty/all_gather"] = (np.zeros((n, 0, 3)), 1e-7)
    want["all_to_all_single/uneven"] = (_uneven(split_inputs(n, 2, 1000), r), 1e-7)
    want["all_to_all_single/uneven_wide"] = (_uneven(split_inputs(n, 100000, 1), r), 1e-7)
    e = [np.arange(2 * n, dtype=np.float32) + 100 * k for k in range(n)]
    want["all_to_all_single/even"] = (
        np.concatenate([e[j][2 * r : 2 * r + 2] for j in range(n)]),
        1e-7,
    )
    want["send_recv/ring"] = (p2p_payload((r - 1) % n), 1e-7)
    want["big/all_reduce"] = ((np.arange(BIG, dtype=np.float32) % 1000) * n + sum(range(n)), 0.0)
    x0, xl = inputs(0, SUBGROUP_SHAPE), inputs(n - 1, SUBGROUP_SHAPE)
    if r in (0, n - 1):
        want["subgroup/all_reduce"] = (x0.astype(np.float64) + xl, 1e-7)
        want["subgroup/broadcast"] = (xl, 1e-7)
    return want
