"""Clear errors: before init, bad arguments, mismatches across ranks, non-members, missing peers.

Messages are asserted by substring. Multi-rank errors run in 2 real processes; each
rank must raise the same error (no rank left waiting), after which the group works.
"""

import json
import re

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tensorplay_jax.runtime.settings import PG_SHM_DEPTH
from tests._procs import free_port, run_and_collect, run_workers
from tests.distributed import _pg_workers as W


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.all_reduce(np.ones(2)),
        lambda: dist.broadcast(np.ones(2), src=0),
        lambda: dist.send(np.ones(2), dst=1),
        lambda: dist.get_rank(),
        lambda: dist.get_world_size(),
        lambda: dist.barrier(),
        lambda: dist.new_group([0]),
        lambda: dist.destroy_process_group(),
    ],
)
def test_call_before_init_process_group_raises(call):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"call tensorplay_jax\.distributed\.init_process_group"):
        call()


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        ({"backend": "mpi"}, ValueError, "backend='mpi' is not supported"),
        ({"engine": "fast"}, ValueError, "engine='fast' is not one of"),
        (
            {"init_method": "ftp://h/x"},
            ValueError,
            "use 'env://', 'tcp://host:port' or 'file:///path'",
        ),
        ({"init_method": "tcp://127.0.0.1"}, ValueError, "must look like 'tcp://host:port'"),
        ({"init_method": "env://"}, ValueError, "needs MASTER_ADDR and MASTER_PORT"),
        (
            {"init_method": "tcp://127.0.0.1:1", "rank": 3, "world_size": 2},
            ValueError,
            "need 0 <= rank < world_size, got rank=3, world_size=2",
        ),
        ({"timeout": -1}, ValueError, "timeout=-1 must be a positive number"),
    ],
)
def test_init_process_group_rejects_bad_arguments(monkeypatch, kwargs, exc, msg):
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(exc, match=re.escape(msg)):
        dist.init_process_group(**{"backend": "gloo", **kwargs})
    assert not dist.is_initialized()


ENGINES = ("shm", "xla", "tcp")
_SHAPES = "(rank 0: (2,), rank 1: (3,))"
_EARLIER = "not run, because an earlier call"

# case: (engines, the error each rank raises: "Type: substring", or None: it returned)
ERRORS = {
    "init_twice": (ENGINES, ["RuntimeError: already initialized"] * 2),
    "shape_mismatch": (
        ENGINES,
        [f"ValueError: all_reduce: shape mismatch across ranks {_SHAPES}"] * 2,
    ),
    "dtype_mismatch": (ENGINES, ["ValueError: all_gather: dtype mismatch across ranks"] * 2),
    "different_collectives": (
        ENGINES,
        ["ValueError: different collectives (rank 0: all_reduce, rank 1: all_gather)"] * 2,
    ),
    "reduce_dst_disagrees": (
        ENGINES,
        ["ValueError: reduce: ranks disagree on src/dst (rank 0: 0, rank 1: 1)"] * 2,
    ),
    "broadcast_src_disagrees": (
        ("xla", "tcp"),
        ["ValueError: broadcast: ranks disagree on src/dst (rank 0: 0, rank 1: 1)"] * 2,
    ),
    # A small shared-memory broadcast's src does not wait for the receivers: a
    # disagreement surfaces on the receivers at once and on the src at its next call,
    # which then runs on no rank.
    "broadcast_shape_mismatch": (
        ("xla", "tcp"),
        ["ValueError: broadcast: shape mismatch across ranks"] * 2,
    ),
    "broadcast_shape_mismatch_src_first": (
        ("shm",),
        [None, f"ValueError: shape mismatch across ranks {_SHAPES}"],
    ),
    "broadcast_both_src": (("shm",), [None, None]),
    "after_both_src": (
        ("shm",),
        ["ValueError: all_reduce: not run, because an earlier call this rank made as src"] * 2,
    ),
    "after_shape_mismatch": (("shm",), [f"ValueError: all_gather: {_EARLIER}"] * 2),
    "broadcast_that_finds_it": (("shm",), [f"ValueError: broadcast: {_EARLIER}"] * 2),
    "src_out_of_range": (
        ENGINES,
        ["ValueError: broadcast: src=5 is out of range; valid ranks are 0..1"] * 2,
    ),
    "dst_negative": (ENGINES, ["ValueError: reduce: dst=-1 is out of range"] * 2),
    "dst_float": (ENGINES, ["TypeError: gather: dst=0.0 must be an int rank"] * 2),
    "scatter_leading_axis": (
        ENGINES,
        ["ValueError: scatter: tensor must have a leading axis of the group size 2"] * 2,
    ),
    "split_sizes_disagree": (
        ENGINES,
        ["ValueError: does not match what the others send it"] * 2,
    ),
    "split_sizes_sum": (
        ENGINES,
        ["ValueError: input_split_sizes=[1, 1] sum to 2, but tensor has 4 rows"] * 2,
    ),
    "avg_of_ints": (
        ENGINES,
        ["TypeError: all_reduce: op='avg' needs a floating or complex input"] * 2,
    ),
    "unknown_op": (ENGINES, ["ValueError: all_reduce: unknown op='median'"] * 2),
    "send_to_self": (
        ENGINES,
        [f"ValueError: send: dst={r} is this process's own rank" for r in (0, 1)],
    ),
    "p2p_shape_mismatch": (
        ENGINES,
        [
            "ValueError: send: shape mismatch across ranks",
            "ValueError: recv: shape mismatch across ranks",
        ],
    ),
    "new_group_out_of_range": (
        ENGINES,
        ["ValueError: new_group: ranks=[0, 7] must be distinct ranks in 0..1 ([7] out of range)"]
        * 2,
    ),
    "src_not_member": (
        ENGINES,
        ["ValueError: broadcast: src=1 is not a member of the group [0]", "absent"],
    ),
    "after_destroy": (ENGINES, ["RuntimeError: has not been initialized"] * 2),
}


@pytest.fixture(scope="module")
def errors(tmp_path_factory) -> list[dict]:
    """Both ranks' results of one ``_pg_workers.errors`` job (every engine in turn)."""
    out = tmp_path_factory.mktemp("errors")
    return run_and_collect(W.errors, 2, out, args=[str(free_port())], timeout=180)


def _matches(got: object, want: str | None) -> bool:
    if want is None or got is None:
        return got is want
    kind, _, text = want.partition(": ")
    return str(got).startswith(kind + ": ") and text in str(got)


@pytest.mark.parametrize(
    "engine, case", [(e, c) for c, (engines, _) in ERRORS.items() for e in engines]
)
def test_bad_call_raises_the_same_error_on_every_rank(errors, engine, case):
    for r, want in enumerate(ERRORS[case][1]):
        key = f"{engine}/{case}"
        if want == "absent":
            assert key not in errors[r], (r, key)
        else:
            assert key in errors[r] and _matches(errors[r][key], want), (r, key, errors[r].get(key))


def test_shm_mismatched_broadcast_ahead_is_found_within_the_ring_depth(errors):
    # A src running broadcasts ahead validates each at the latest PG_SHM_DEPTH - 1
    # calls later; the calls in between run, the one that finds it runs nowhere.
    assert errors[0]["shm/broadcast_shape_mismatch_ahead"] is None
    want = "ValueError: shape mismatch across ranks"
    assert _matches(errors[1]["shm/broadcast_shape_mismatch_ahead"], want)
    for r in (0, 1):
        assert errors[r]["shm/broadcasts_in_between"] == [1.0] * (PG_SHM_DEPTH - 2), r
        assert _matches(
            errors[r]["shm/broadcast_that_finds_it"], ERRORS["broadcast_that_finds_it"][1][r]
        )
        assert errors[r]["shm/all_reduce_after_ahead"] == 2.0, r  # and the group works on


@pytest.mark.parametrize("engine", ENGINES)
def test_a_non_member_s_collective_warns_and_does_nothing(errors, engine):
    assert errors[1][f"{engine}/non_member"] == [
        "None",
        ["Running all_reduce on global rank 1 which does not belong to the given group."],
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_group_works_after_the_errors(errors, engine):
    for r in (0, 1):
        np.testing.assert_allclose(errors[r][f"{engine}/all_reduce_after"], np.full(4, 2.0))
    np.testing.assert_allclose(errors[0][f"{engine}/solo_all_reduce"], np.ones(4))


# A live peer that never joins first: the barrier test takes those three (indirect), at the
# same parameter indices, so each job runs once for every test that reads it.
_STUCK = [(e, "stuck") for e in ("shm", "xla", "tcp")]
_MISSING = [*_STUCK, *((e, "exit") for e in ("shm", "xla", "tcp"))]


@pytest.fixture(scope="module", params=_MISSING, ids="-".join)
def missing_peer(request, tmp_path_factory):
    """``(engine, mode, seen)``: rank 1 of 2 never joins (``stuck``) or dies (``exit``);
    ``seen`` says how rank 0's calls failed (``_pg_workers._failure``)."""
    engine, mode = request.param
    out = tmp_path_factory.mktemp("missing") / "seen.json"
    res = run_workers(W.missing, 2, args=[engine, mode, str(out)], timeout=60, check=False)
    assert res[0].returncode == 0, str(res[0])
    if mode == "stuck":  # the late rank itself is unharmed
        assert res[1].returncode == 0, str(res[1])
    return engine, mode, json.loads(out.read_text())


@pytest.mark.parametrize("missing_peer", _STUCK, ids="-".join, indirect=True)
def test_missing_peer_barrier_times_out_at_its_own_timeout(missing_peer):
    barrier = missing_peer[2]["barrier"]
    assert "TimeoutError" in barrier["types"], barrier
    assert "barrier: Timed out after 1s" in barrier["message"], barrier
    assert barrier["took"] < 4, barrier


def test_missing_peer_fails_a_collective_within_the_group_timeout(missing_peer):
    engine, mode, seen = missing_peer
    failed = seen["all_reduce"]
    assert {"TimeoutError", "RuntimeError"} & set(failed["types"]), failed
    assert failed["took"] < 5.0, failed
    msg = failed["message"]
    if mode == "exit" and engine == "shm":
        assert "all_reduce: rank 1 (pid" in msg and "exited" in msg, msg
    elif mode == "exit" and engine == "tcp":
        assert "all_reduce: lost the connection to rank 1" in msg, msg
    else:
        assert "all_reduce: Timed out" in msg and "rank(s) [1]" in msg, msg


def test_missing_peer_leaves_the_group_unusable(missing_peer):
    again = missing_peer[2]["again"]
    assert "RuntimeError" in again["types"], again
    assert "unusable after an earlier failure" in again["message"], again
