"""``remote(..., timeout=t)``: a creation not confirmed within ``t`` fails the next use.

Every kind of use (``to_here``, the three proxies, passing the RRef on to
``rpc_sync``/``rpc_async``/``remote``) raises an ``RpcTimeoutError`` naming the
owner, the function and the timeout, whether it started before the deadline or
after; within the timeout every use works; the owner frees the values all the
same once the user drops its RRefs. This process is ``w0`` (the user), ``w1`` owns
the values, ``w2`` receives RRefs passed on.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from tensorplay_jax.distributed import rpc
from tests._worker import expect, wait_until
from tests.rpc import _rref_workers as W
from tests.rpc import _targets as T
from tests.rpc._jobs import rpc_job

T_OUT = 0.4  # the remote() timeout
SLOW = 1.5  # how long the owner takes to make the value
# What a timeout says: the owner, the function and the timeout.
SAYS = [f"RPC ran for more than {T_OUT:g} seconds", "'w1'", "make_slowly"]

USES: dict[str, Callable[[rpc.RRef], int]] = {
    "to_here": lambda r: r.to_here().total(),
    "rref.rpc_sync()": lambda r: r.rpc_sync().total(),
    "rref.rpc_async()": lambda r: r.rpc_async().total().wait(),
    "rref.remote()": lambda r: r.remote().total().to_here(),
    "passed to rpc_sync": lambda r: rpc.rpc_sync("w2", W.fetch_total, args=(r,)),
    "passed to rpc_async": lambda r: rpc.rpc_async("w2", W.fetch_total, args=(r,)).wait(),
    "passed to remote": lambda r: rpc.remote("w2", W.fetch_total, args=(r,)).to_here(),
}
made = [0]  # make_slowly values this module asked w1 for (each is made, late or not)


def _remote(delay: float, n: int, timeout: float) -> rpc.RRef:
    made[0] += 1
    return rpc.remote("w1", W.make_slowly, args=(delay, n), timeout=timeout)


@pytest.fixture(scope="module")
def job():
    with rpc_job(3, timeout=60) as w:
        yield w


def test_a_dropped_rref_is_released_while_a_use_that_timed_out_is_still_in_flight(job):
    # (First in the module: the other tests run while the value is made.)
    # The use's call to w2 goes on after the creation's timeout failed it (w2 waits for
    # the value, made after 5 s); the user's release of its fork must not wait for it.
    r = _remote(5.0, 4, T_OUT)
    expect(rpc.RpcTimeoutError, SAYS, USES["passed to rpc_async"], r)
    rid, fork = r._id, r._fork
    del r
    gc.collect()  # the use's error and its frames (the test's own)
    record = lambda: [rec for rec in rpc.rpc_sync("w1", W.owner_records) if rec[0] == rid]
    wait_until(lambda: fork not in record()[0][1], timeout=4)
    # Released before the value exists, so while w2's fetch (and the use's call) waited.
    assert record()[0][3] is False, record()


@pytest.mark.parametrize("use", list(USES))
def test_a_use_right_after_remote_fails_once_the_creation_is_overdue(job, use):
    # It fails at T_OUT, not when the value is made (SLOW), and never returns the value.
    r = _remote(SLOW, 4, T_OUT)
    t0 = time.monotonic()
    e = expect(rpc.RpcTimeoutError, SAYS, USES[use], r)
    assert time.monotonic() - t0 < SLOW - 0.2
    assert isinstance(e, TimeoutError)
    assert not r.confirmed_by_owner()
    # The next use fails at once, naming what was tried.
    t0 = time.monotonic()
    expect(rpc.RpcTimeoutError, ["not confirmed by its owner in time", *SAYS], USES[use], r)
    assert time.monotonic() - t0 < 0.5


def test_to_here_after_a_timed_out_use_says_the_creation_was_not_confirmed(job):
    r = _remote(SLOW, 4, T_OUT)
    expect(rpc.RpcTimeoutError, SAYS, USES["passed to remote"], r)
    expect(rpc.RpcTimeoutError, ["to_here: RRef creation was not confirmed", *SAYS], r.to_here)


def test_a_use_after_the_deadline_raises_at_once(job):
    late = _remote(SLOW, 4, T_OUT)
    time.sleep(T_OUT + 0.3)
    for name, use in USES.items():
        t0 = time.monotonic()
        expect(rpc.RpcTimeoutError, SAYS, use, late)
        assert time.monotonic() - t0 < 0.3, name


@pytest.mark.parametrize("use", list(USES))
def test_every_use_works_within_the_timeout(job, use):
    assert USES[use](_remote(0.1, 5, 10)) == 10


def test_a_confirmed_rref(job):
    r = _remote(0.1, 5, 10)
    assert r.to_here().total() == 10 and r.confirmed_by_owner()


def test_an_error_in_the_function_stays_that_error(job):
    bad = rpc.remote("w1", T.fail, args=("boom",), timeout=10)
    expect(ValueError, ["boom"], bad.to_here)


def test_the_owner_frees_every_value_once_its_user_dropped_it(job):
    # Timed out or not: the owner made every value (some late), and frees each.
    gc.collect()
    owner = lambda: rpc.rpc_sync("w1", W.made_and_alive)
    wait_until(lambda: owner() == (made[0], 0), timeout=30)
    # And keeps no bookkeeping record of any of them.
    wait_until(lambda: rpc.rpc_sync("w1", W.owner_records) == [], timeout=10)


def test_a_failed_creation_is_released_as_soon_as_its_user_drops_it(job):
    # With the cyclic collector off: the RRef goes with its last reference. Before, each
    # use raised the creation's own error (kept by the RRef), whose traceback then held
    # the use's frames and so the RRef: a cycle, and the owner kept the record [id,
    # creation fork, created, error set] until w0's next full collection (under load,
    # past the test above, in 3 of 6 runs).
    gc.collect()
    gc.disable()
    try:
        bad = rpc.remote("w1", T.fail, args=("boom",), timeout=10)
        for use in USES.values():
            expect(ValueError, ["boom"], use, bad)
        rid = bad._id
        del bad
        ids = lambda: [r[0] for r in rpc.rpc_sync("w1", W.owner_records)]
        wait_until(lambda: rid not in ids(), timeout=10)
    finally:
        gc.enable()


def test_a_release_that_overtakes_its_creation_leaves_no_record(job):
    # The creation's own fork released before its remote() arrives (a FORK_DEL that
    # overtook it, parked on the owner): before, the creation consumed the parked
    # release and kept an empty record for ever (num_owner_rrefs stayed 1).
    from tensorplay_jax.rpc import _agent, _protocol

    agent = _agent.current_agent()
    w1 = agent.resolve("w1", "test")
    rid, fork = agent.rrefs.new_id(), agent.rrefs.new_id()
    agent.call(w1, _protocol.FORK_DEL, extra=(rid, fork)).wait(timeout=10)
    made[0] += 1
    agent.call(w1, _protocol.REMOTE, W.make_slowly, (0.0, 3), extra=(rid, fork)).wait(timeout=10)
    ids = [r[0] for r in rpc.rpc_sync("w1", W.owner_records)]
    assert rid not in ids, [hex(i) for i in ids]
