"""Future and wait_all in one process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorplay_jax.rpc import Future, wait_all


def test_then_chains_and_propagates_errors():
    f = Future()
    g = f.then(lambda fut: fut.wait() * 2)
    h = g.then(lambda fut: 1 / 0)
    f.set_result(21)
    assert g.wait(timeout=5) == 42 and g.done()
    with pytest.raises(ZeroDivisionError):
        h.wait(timeout=5)


def test_callbacks_run_once_and_late_callbacks_run_at_once():
    f = Future()
    seen = []
    f.add_done_callback(lambda fut: seen.append(fut.value()))
    f.set_result("x")
    f.add_done_callback(lambda fut: seen.append("late"))
    assert seen == ["x", "late"]
    with pytest.raises(RuntimeError, match="already set"):
        f.set_result("again")


def test_wait_timeout_and_cross_thread_completion():
    f = Future()
    with pytest.raises(TimeoutError, match="not done"):
        f.wait(timeout=0.01)
    threading.Timer(0.05, f.set_exception, args=(ValueError("bad"),)).start()
    with pytest.raises(ValueError, match="bad"):
        f.wait(timeout=5)
    assert isinstance(f.exception(), ValueError)


def test_wait_all_and_executor_callbacks():
    with ThreadPoolExecutor(2) as ex:
        fs = [Future(callback_executor=ex) for _ in range(3)]
        outs = [f.then(lambda fut: fut.wait() + 1) for f in fs]
        for i, f in enumerate(fs):
            f.set_result(i)
        assert wait_all(outs) == [1, 2, 3]
    bad = Future()
    bad.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        wait_all([outs[0], bad])
