"""tensorplay's private all-gather (``rpc.api._all_gather``, ``_barrier``, ``_wait_all_workers``).

``w0`` is the test process (the leader: the smallest name); ``w1`` and ``w2`` are started
workers that join each gathering through an RPC the test makes. The oracle is the
meaning tensorplay gives it: every worker gets every worker's object, by name; a
worker that does not come makes the others fail within the timeout, naming it.
"""

from __future__ import annotations

import time

import pytest

from tensorplay_jax.distributed import rpc
from tests.rpc import _all_gather_targets as G
from tests.rpc._jobs import rpc_job

EVERYONE = {"w0": 0, "w1": 1, "w2": 2}


@pytest.fixture(scope="module")
def job():
    with rpc_job(3) as w:
        yield w


def test_every_worker_gets_every_workers_object_by_name(job):
    others = [rpc.rpc_async(n, G.gather_rank) for n in ("w1", "w2")]
    assert G.gather_rank() == EVERYONE
    assert [f.wait() for f in others] == [EVERYONE, EVERYONE]


def test_a_gathering_of_some_workers_leaves_the_others_out(job):
    other = rpc.rpc_async("w2", G.gather_rank, args=(["w0", "w2"],))
    assert G.gather_rank(["w0", "w2"]) == {"w0": 0, "w2": 2}
    assert other.wait() == {"w0": 0, "w2": 2}


def test_barrier_and_wait_all_workers_return_once_everyone_came(job):
    others = [rpc.rpc_async(n, rpc.api._barrier, args=(["w0", "w1", "w2"],)) for n in ("w1", "w2")]
    assert rpc.api._barrier(["w0", "w1", "w2"]) is None
    assert [f.wait() for f in others] == [None, None]
    others = [rpc.rpc_async(n, rpc.api._wait_all_workers) for n in ("w1", "w2")]
    assert rpc.api._wait_all_workers() is None
    assert [f.wait() for f in others] == [None, None]


def test_a_worker_that_does_not_come_fails_the_leader_within_the_timeout(job):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"timed out in _all_gather after 0\.50 seconds"):
        G.gather_rank(["w0", "w1"], timeout=0.5)  # w1 never calls it
    assert time.monotonic() - start < 5
