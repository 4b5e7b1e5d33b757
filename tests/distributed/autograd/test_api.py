"""The seed example of issue 4 as written, RPC-not-initialized errors.

The docstring examples run in ``tests/test_doctests.py``."""

from __future__ import annotations

from tests._procs import reported
from tests.distributed.autograd import _workers as W


def test_seed_example_one_worker(workers):
    (res,) = workers(W.seed, 1, timeout=120)
    got = reported(res)
    # before init_rpc: clear errors, no hang
    assert got["context_error"].startswith("RpcNotInitializedError: "), got
    assert "RPC has not been initialized" in got["context_error"], got
    assert "init_rpc" in got["context_error"], got
    want = "RpcNotInitializedError: RPC has not been initialized (dist_autograd.backward)"
    assert got["backward_error"].startswith(want), got
    assert got["available"] and not got["initialized_before"], got
    assert got["grad"] == [2.0, 2.0, 2.0, 2.0], got  # d(sum(2 t))/dt
    assert not got["initialized_after"], got  # shutdown ends it


def test_seed_example_three_workers(workers):
    res = workers(W.seed_multi, 3, timeout=120)
    assert reported(res[0])["grad"] == [4.0, 4.0, 4.0, 4.0]  # doubled twice along the chain
