"""The public RPC API across real worker processes on loopback."""

from __future__ import annotations

import pytest

from tests.rpc import _transports as T
from tests.rpc import _workers as W


@pytest.mark.parametrize("transport", T.NAMES)
def test_api_three_workers(workers, transport):
    env = T.env_of(transport)
    res = workers(W.api, 3, timeout=150, env=env)
    assert "API-OK" in res[0].stdout
    assert all(f"DONE {r.rank}" in r.stdout for r in res)


@pytest.mark.parametrize("transport", T.NAMES)
def test_call_into_a_worker_still_in_init_rpc_waits(workers, transport):
    env = T.env_of(transport)
    res = workers(W.late_init, 3, timeout=120, env=env)
    assert "LATE-OK" in res[0].stdout, res[0].stdout


def test_world_size_one_and_calls_before_init(workers):
    (res,) = workers(W.solo, 1, timeout=90)
    assert "SOLO-OK" in res.stdout


def test_duplicate_names_fail_on_every_worker(workers):
    res = workers(W.duplicate, 2, timeout=90)
    assert all(f"DUP-OK {r.rank}" in r.stdout for r in res)
