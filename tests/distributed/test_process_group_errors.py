"""Clear errors: before init, bad arguments, mismatches across ranks, non-members, missing peers.

Messages are asserted by substring. Multi-rank errors run in 2 real processes; each
rank must raise the same error (no rank left waiting), after which the group works.
"""

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


@pytest.mark.parametrize("engine", ["shm", "xla", "tcp"])
@pytest.mark.parametrize("mode", ["stuck", "exit"])
def test_missing_peer_fails_within_timeout(engine, mode):
    res = run_workers(W.missing, 2, args=[engine, mode], timeout=60, check=False)
    assert "MISSING-OK" in res[0].stdout, str(res[0])
    assert res[0].returncode == 0, str(res[0])
    if mode == "stuck":  # the late rank itself is unharmed
        assert res[1].returncode == 0, str(res[1])
