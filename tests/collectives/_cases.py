"""The test matrix: every collective (and op, and split axis) as a case, with its reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

from tensorplay_jax import collectives as C
from tests.collectives import _reference as R

OPS = ("sum", "avg", "max", "min", "prod")


@dataclasses.dataclass(frozen=True)
class Case:
    """One collective call: ``fn(x, axis_name)`` on per-rank inputs of ``in_shape(n)``."""

    name: str
    fn: Callable[[Any, int], Callable]  # (n) -> (x, axis_name) -> y
    ref: Callable[[int], Callable]  # (n) -> (list of per-rank x) -> list of per-rank y
    in_shape: Callable[[int], tuple]
    nonlinear: bool = False  # the Jacobian depends on x (max/min/prod)
    min_n: int = 1

    def __str__(self) -> str:
        return self.name


def _uneven_sends(n: int) -> list[list[int]]:
    # Rows each rank sends to each rank; rows and columns both add up to 2n.
    return [[(1 + 2 * ((r + j) % 2)) if n > 1 else 2 for j in range(n)] for r in range(n)]


def _received(n: int) -> list[list[int]]:
    # output_split_sizes[r][j] = rows rank r receives from rank j = sends[j][r].
    return [list(c) for c in zip(*_uneven_sends(n), strict=True)]


def _cases() -> list[Case]:
    cases = []
    for op in OPS:
        nl = op in ("max", "min", "prod")
        cases += [
            Case(
                f"all_reduce-{op}",
                lambda n, op=op: lambda x, a: C.all_reduce(x, a, op=op),
                lambda n, op=op: partial(R.all_reduce, op=op),
                lambda n: (3, 2),
                nonlinear=nl,
            ),
            Case(
                f"reduce-{op}",
                lambda n, op=op: lambda x, a: C.reduce(x, n // 2, a, op=op),
                lambda n, op=op: partial(R.reduce, dst=n // 2, op=op),
                lambda n: (3, 2),
                nonlinear=nl,
            ),
            Case(
                f"reduce_scatter-{op}",
                lambda n, op=op: lambda x, a: C.reduce_scatter(x, a, op=op),
                lambda n, op=op: partial(R.reduce_scatter, op=op),
                lambda n: (n, 3),
                nonlinear=nl,
            ),
        ]
    cases += [
        Case(
            "reduce_scatter-axis1",
            lambda n: lambda x, a: C.reduce_scatter(x, a, axis=1),
            lambda n: partial(R.reduce_scatter, axis=1),
            lambda n: (2, n),
        ),
        Case(
            "broadcast",
            lambda n: lambda x, a: C.broadcast(x, n - 1, a),
            lambda n: partial(R.broadcast, src=n - 1),
            lambda n: (3, 2),
        ),
        Case(
            "gather",
            lambda n: lambda x, a: C.gather(x, n - 1, a),
            lambda n: partial(R.gather, dst=n - 1),
            lambda n: (2, 3),
        ),
        Case(
            "gather-axis1",
            lambda n: lambda x, a: C.gather(x, 0, a, axis=1),
            lambda n: partial(R.gather, dst=0, axis=1),
            lambda n: (2, 3),
        ),
        Case(
            "scatter",
            lambda n: lambda x, a: C.scatter(x, 0, a),
            lambda n: partial(R.scatter, src=0),
            lambda n: (n, 3),
        ),
        Case(
            "scatter-axis1",
            lambda n: lambda x, a: C.scatter(x, n // 2, a, axis=1),
            lambda n: partial(R.scatter, src=n // 2, axis=1),
            lambda n: (2, n),
        ),
        Case(
            "all_gather",
            lambda n: lambda x, a: C.all_gather(x, a),
            lambda n: R.all_gather,
            lambda n: (2, 3),
        ),
        Case(
            "all_gather-axis2",
            lambda n: lambda x, a: C.all_gather(x, a, axis=2),
            lambda n: partial(R.all_gather, axis=2),
            lambda n: (2, 3),
        ),
        Case(
            "all_gather_single",
            lambda n: lambda x, a: C.all_gather_single(x, a),
            lambda n: R.all_gather_single,
            lambda n: (2, 3),
        ),
        Case(
            "all_gather_single-axis1",
            lambda n: lambda x, a: C.all_gather_single(x, a, axis=1),
            lambda n: partial(R.all_gather_single, axis=1),
            lambda n: (2, 3),
        ),
        Case(
            "all_to_all",
            lambda n: lambda x, a: C.all_to_all(x, a),
            lambda n: R.all_to_all,
            lambda n: (2 * n, 3),
        ),
        Case(
            "all_to_all-split1-concat0",
            lambda n: lambda x, a: C.all_to_all(x, a, split_axis=1, concat_axis=0),
            lambda n: partial(R.all_to_all, split_axis=1, concat_axis=0),
            lambda n: (2, n),
        ),
        Case(
            "all_to_all_single",
            lambda n: lambda x, a: C.all_to_all_single(x, a),
            lambda n: R.all_to_all_single,
            lambda n: (2 * n, 3),
        ),
        Case(
            "all_to_all_single-uneven",
            lambda n: lambda x, a: C.all_to_all_single(x, a, input_split_sizes=_uneven_sends(n)),
            lambda n: partial(R.all_to_all_single, sends=_uneven_sends(n)),
            lambda n: (2 * n, 3),
        ),
        Case(
            "all_to_all_single-uneven-axis1-outsizes",
            lambda n: (
                lambda x, a: C.all_to_all_single(x, a, output_split_sizes=_received(n), axis=1)
            ),
            lambda n: partial(R.all_to_all_single, sends=_uneven_sends(n), axis=1),
            lambda n: (3, 2 * n),
        ),
    ]
    return cases


CASES = _cases()
CASE_IDS = [c.name for c in CASES]

# One case per collective and per non-linear rule (max, prod, avg): the cases every
# execution mode runs. A case's variants (an axis, split/concat dimensions, uneven
# sizes) change the parameters a rule is given, not how a mode dispatches it, so the
# other variants run in the reference mode (shard_map under jit) only, at every size.
REPRESENTATIVE = frozenset(
    {
        "all_reduce-sum",
        "all_reduce-prod",
        "reduce-max",
        "reduce_scatter-avg",
        "reduce_scatter-min",
        "broadcast",
        "gather-axis1",
        "scatter",
        "all_gather-axis2",
        "all_gather_single",
        "all_to_all-split1-concat0",
        "all_to_all_single-uneven",
    }
)
assert REPRESENTATIVE.issubset(CASE_IDS), "every representative case exists"
