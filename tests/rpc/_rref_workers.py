"""Worker functions of ``test_remote_timeout.py``: ``remote(..., timeout=t)`` and later uses."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np

from tensorplay_jax.distributed import rpc
from tests._worker import expect, init_rpc, rank_and_world_size, wait_until
from tests.rpc import _targets as T

_made: list[weakref.ref] = []
_lock = threading.Lock()


class Slow:
    """A value that took a while to make; its owner counts the live ones."""

    def __init__(self, n: int) -> None:
        self.data = np.arange(n)

    def total(self) -> int:
        return int(self.data.sum())


def make_slowly(delay: float, n: int) -> Slow:
    time.sleep(delay)
    s = Slow(n)
    with _lock:
        _made.append(weakref.ref(s))
    return s


def made_and_alive() -> tuple[int, int]:
    gc.collect()
    with _lock:
        return len(_made), sum(r() is not None for r in _made)


def fetch_total(r: rpc.RRef) -> int:
    return r.to_here().total()


T_OUT = 0.4  # the remote() timeout
SLOW = 1.5  # how long the owner takes to make the value


def _uses() -> dict:
    """Every kind of use of an RRef, each returning the value's total."""
    return {
        "to_here": lambda r: r.to_here().total(),
        "rref.rpc_sync()": lambda r: r.rpc_sync().total(),
        "rref.rpc_async()": lambda r: r.rpc_async().total().wait(),
        "rref.remote()": lambda r: r.remote().total().to_here(),
        "passed to rpc_sync": lambda r: rpc.rpc_sync("w2", fetch_total, args=(r,)),
        "passed to rpc_async": lambda r: rpc.rpc_async("w2", fetch_total, args=(r,)).wait(),
        "passed to remote": lambda r: rpc.remote("w2", fetch_total, args=(r,)).to_here(),
    }


def remote_timeout() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        owner = lambda: rpc.rpc_sync("w1", made_and_alive)
        # What a timeout says: the owner, the function and the timeout.
        says = [f"RPC ran for more than {T_OUT:g} seconds", "'w1'", "make_slowly"]

        # A use right after remote(): it fails once the creation is overdue (at T_OUT),
        # not when the value is made (SLOW), and never returns the value.
        for name, use in _uses().items():
            r = rpc.remote("w1", make_slowly, args=(SLOW, 4), timeout=T_OUT)
            t0 = time.monotonic()
            e = expect(rpc.RpcTimeoutError, says, use, r)
            took = time.monotonic() - t0
            assert took < SLOW - 0.2, (name, took)
            assert isinstance(e, TimeoutError), name
            assert not r.confirmed_by_owner(), name
            # The next use fails at once, naming what was tried.
            t0 = time.monotonic()
            expect(rpc.RpcTimeoutError, ["not confirmed by its owner in time", *says], use, r)
            assert time.monotonic() - t0 < 0.5, name
        expect(
            rpc.RpcTimeoutError,
            ["to_here: this RRef's creation was not confirmed", *says],
            r.to_here,
        )
        print("OVERDUE-OK")

        # A use after the deadline passed raises at once, before sending anything.
        late = rpc.remote("w1", make_slowly, args=(SLOW, 4), timeout=T_OUT)
        time.sleep(T_OUT + 0.3)
        for name, use in _uses().items():
            t0 = time.monotonic()
            expect(rpc.RpcTimeoutError, says, use, late)
            assert time.monotonic() - t0 < 0.3, name
        print("LATE-OK")

        # Within its timeout every use works, and the RRef is confirmed.
        for name, use in _uses().items():
            r = rpc.remote("w1", make_slowly, args=(0.1, 5), timeout=10)
            assert use(r) == 10, name
        r = rpc.remote("w1", make_slowly, args=(0.1, 5), timeout=10)
        assert r.to_here().total() == 10 and r.confirmed_by_owner()
        # An error in the function stays that error.
        bad = rpc.remote("w1", T.fail, args=("boom",), timeout=10)
        expect(ValueError, ["boom"], bad.to_here)
        print("IN-TIME-OK")

        # No leak: the owner made every value (late), and frees each once its user dropped
        # it, timed out or not.
        del r, late, bad, e
        gc.collect()
        made = 2 * len(_uses()) + 2  # overdue, in time, one late, one more in time
        wait_until(lambda: owner() == (made, 0), timeout=30)
        # KNOWN BUG, not checked here: the owner can keep one bookkeeping record (a fork
        # of a remote() that timed out on the user) after its value is gone
        # (num_owner_rrefs == 1, most runs under load); see the closing note of issue 15.
        print("NO-LEAK-OK", owner())
    rpc.shutdown()
    print("DONE", rank)
