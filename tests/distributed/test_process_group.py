"""Blocking collectives on 2, 3 and 4 real processes, every engine, against numpy answers.

One job per (engine, world size) runs every collective (``_pg_workers.values``) and
hands back what each returned; each test here checks one collective on every rank
against numpy computed from every rank's input (``_pg_cases.expected``).
"""

from typing import NamedTuple

import numpy as np
import pytest

from tests._procs import run_and_collect
from tests.distributed import _pg_cases as C
from tests.distributed import _pg_workers as W

# shm and xla run one code path at every world size (a ring; one shard_map over the
# ranks), so each runs at 4; tcp also has a two-rank direct path and runs at 2, 3 and 4.
JOBS = [("shm", 4), ("xla", 4), ("tcp", 2), ("tcp", 3), ("tcp", 4)]


class Job(NamedTuple):
    """One ``values`` job: its engine, world size, every rank's results and numpy answers."""

    engine: str
    n: int
    got: list[dict]
    want: list[dict[str, tuple[np.ndarray, float]]]  # ``_pg_cases.expected``, per rank


@pytest.fixture(scope="module", params=JOBS, ids=lambda p: f"{p[0]}-{p[1]}")
def job(request, tmp_path_factory) -> Job:
    """One ``values`` job; every rank's answers are computed once, for all the tests."""
    engine, n = request.param
    out = tmp_path_factory.mktemp(f"values-{engine}-{n}")
    got = run_and_collect(W.values, n, out, args=[engine], timeout=240)
    return Job(engine, n, got, [C.expected(n, r, engine) for r in range(n)])


def _check(job: Job, family: str) -> None:
    """Every rank's results under ``family/`` equal the numpy answers, in shape and dtype."""
    n, got = job.n, job.got
    checked = 0
    for r in range(n):
        want = {k: v for k, v in job.want[r].items() if k.startswith(family + "/")}
        mine = {k: v for k, v in got[r].items() if k.startswith(family + "/")}
        checked += len(want)
        assert sorted(mine) == sorted(want), (r, family)
        for key, (answer, rtol) in want.items():
            y = mine[key]
            assert y.shape == np.shape(answer), (r, key, y.shape, np.shape(answer))
            np.testing.assert_allclose(
                y.astype(np.float64),
                answer.astype(np.float64),
                rtol=rtol,
                err_msg=f"rank {r} {key}",
            )
    assert checked, f"no results under {family}/"


FAMILIES = ["all_reduce", "broadcast", "reduce", "gather", "all_gather", "scatter"]
FAMILIES += ["reduce_scatter", "all_to_all", "all_to_all_single", "send_recv", "big"]


@pytest.mark.parametrize("family", FAMILIES)
def test_collective_matches_numpy(job, family):
    _check(job, family)


def test_all_reduce_keeps_the_input_dtype(job):
    engine, n, got = job.engine, job.n, job.got
    for r in range(n):
        for dtype, shape, _ in C.cases(n, engine):
            t = C.tag(dtype, shape)
            for op in C.reduce_ops(dtype):
                assert got[r][f"all_reduce/{t}/{op}"].dtype == np.dtype(dtype), (r, t, op)


def test_scalars_and_empty_arrays(job):
    _check(job, "scalar")
    _check(job, "empty")


def test_subgroup_of_first_and_last_rank(job):
    n, got = job.n, job.got
    for r in range(n):
        assert got[r]["subgroup_info/ranks"] == (0, n - 1) and got[r]["subgroup_info/size"] == 2
        assert got[r]["subgroup_info/rank"] == {0: 0, n - 1: 1}.get(r, -1), r
    _check(job, "subgroup")


def test_init_and_destroy_state(job):
    n, got = job.n, job.got
    for r in range(n):
        assert got[r]["state/initialized"] is True and got[r]["state/backend"] == "gloo"
        assert got[r]["state/initialized_after_destroy"] is False


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> list[dict]:
    """Every rank's engine counters of one ``cache`` job (2 ranks)."""
    return run_and_collect(W.cache, 2, tmp_path_factory.mktemp("cache"), timeout=120)


def test_xla_programs_are_traced_once_per_shape_and_op(cache):
    for got in cache:
        assert got["xla/name"] == "xla"
        traces, programs = got["xla/first"]
        assert got["xla/repeated"] == (traces, programs), got
        assert got["xla/cache_size"] == 1, got
        assert got["xla/new_shape_and_op"] == (traces + 2, programs + 2), got


def test_shm_slots_grow_once_then_are_reused(cache):
    for got in cache:
        assert got["shm/name"] == "shm"
        assert got["shm/repeated"] == got["shm/first"], got
        assert got["shm/larger"] == got["shm/first"] + 1, got
