"""Clear errors: before init, bad arguments, mismatches across ranks, non-members, missing peers.

Messages are asserted by substring. Multi-rank errors run in 2 real processes; each
rank must raise the same error (no rank left waiting), after which the group works.
"""

import json
import re

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tests._procs import free_port, run_workers
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
        ({"init_method": "file:///tmp/x"}, ValueError, "use 'env://' or 'tcp://host:port'"),
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


def test_mismatches_and_bad_arguments_raise_on_every_rank():
    port = free_port()
    res = run_workers(W.errors, 2, args=[str(port)], timeout=180)
    for w in res:
        assert f"ERRORS-OK {w.rank}" in w.stdout, str(w)


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
    assert "barrier: timed out after 1s" in barrier["message"], barrier
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
        assert "all_reduce: timed out" in msg and "rank(s) [1]" in msg, msg


def test_missing_peer_leaves_the_group_unusable(missing_peer):
    again = missing_peer[2]["again"]
    assert "RuntimeError" in again["types"], again
    assert "unusable after an earlier failure" in again["message"], again
