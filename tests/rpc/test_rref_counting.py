"""Distributed reference counting: owners free values no worker holds an RRef to.

One job of three workers (``w0`` is the test process) serves every test; each
test ends with the owner holding nothing. Shutdown with RRefs still held (the
leak check) is in ``test_rref_shutdown.py``.
"""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from tensorplay_jax import rpc
from tests._worker import wait_until
from tests.rpc import _targets as T
from tests.rpc._jobs import rpc_job


@pytest.fixture(scope="module")
def job():
    with rpc_job(3) as w:
        yield w


def owned() -> int:
    """RRefs w1 owns."""
    return rpc.rpc_sync("w1", T.num_owned)


def alive() -> int:
    """Values w1 made with ``make_tracked`` that are still alive."""
    return rpc.rpc_sync("w1", T.tracked_alive)


def test_the_owner_keeps_a_value_while_any_user_holds_it(job):
    r = rpc.remote("w1", T.make_tracked, args=(1000,))
    assert r.to_here().data.shape == (1000,)
    assert (owned(), alive()) == (1, 1)
    assert rpc.rpc_sync("w2", T.keep, args=(r,)) is False  # w2 becomes a user too
    del r
    gc.collect()
    time.sleep(0.5)
    assert (owned(), alive()) == (1, 1)  # w2 still holds it
    rpc.rpc_sync("w2", T.drop)
    wait_until(lambda: (owned(), alive()) == (0, 0))


def test_copies_in_flight_to_several_workers_are_all_released(job):
    r = rpc.remote("w1", T.make_tracked, args=(10,))
    futs = [rpc.rpc_async(f"w{i % 3}", T.identity, args=([r, {"k": r}],)) for i in range(20)]
    outs = rpc.wait_all(futs)
    assert all(o[0].owner_name() == "w1" and o[1]["k"].owner_name() == "w1" for o in outs)
    assert rpc.rpc_sync("w1", T.keep, args=(r,)) is True  # at the owner it is local
    rpc.rpc_sync("w1", T.drop)
    del r, outs, futs
    gc.collect()
    wait_until(lambda: (owned(), alive()) == (0, 0))


def test_an_owner_rref_sent_around_is_released(job):
    mine = rpc.RRef(np.ones(3))
    assert rpc.rpc_sync("w2", T.rref_sum, args=(mine,)) == 3
    wait_until(lambda: rpc.get_debug_info()["num_owner_rrefs"] == 0)


def test_an_rref_passed_on_before_its_owner_created_it(job):
    # remote() on w1, then at once hand the RRef to w2, which fetches it from w1: w2's
    # fetch can reach w1 before the remote() call does; the owner must wait for the
    # value (as tensorplay's owner does), not report the RRef missing.
    futs = []
    for i in range(100):
        r = rpc.remote("w1", np.full, args=(3, i))
        futs.append(rpc.rpc_async("w2", T.rref_sum, args=(r,)))
    assert [int(f.wait()) for f in futs] == [3 * i for i in range(100)]
    del r, futs
    gc.collect()
    wait_until(lambda: owned() == 0)
