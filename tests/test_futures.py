"""``tensorplay_jax.futures``: each method of the one Future, ``collect_all`` and ``wait_all``.

In one process, with and without threads; the semantics are ``torch.futures``'s
(callbacks run once, ``then`` keeps a callback's error, ``collect_all`` fails at
the first failure), plus the two ways this package completes futures: a
callback executor (RPC's pool) and ``drive`` (a process group's queued send).
"""

from __future__ import annotations

import logging
import pickle
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
from tensorplay_jax import futures, rpc
from tensorplay_jax.futures import CallbackError, Future, collect_all, wait_all


def _set_later(fut: Future, value: object, delay: float = 0.05) -> threading.Timer:
    method = fut.set_exception if isinstance(value, BaseException) else fut.set_result
    t = threading.Timer(delay, method, args=(value,))
    t.start()
    return t


# ------------------------------------------------------------------ one public class
def test_one_future_everywhere():
    assert tp.futures is futures
    assert rpc.Future is Future and dist.Future is Future
    assert rpc.wait_all is wait_all
    assert isinstance(dist.Work.completed(1).get_future(), Future)


# ------------------------------------------------------------------ done, wait, value
def test_done_wait_value_after_set_result():
    f = Future()
    assert not f.done()
    f.set_result(3)
    assert f.done() and f.wait() == 3 and f.value() == 3 and f.exception() is None
    assert repr(f) == "<Future done>"


def test_wait_and_value_raise_the_exception_set():
    f = Future()
    f.set_exception(ValueError("bad"))
    assert f.done() and repr(f) == "<Future failed>"
    for read in (f.wait, f.value):
        with pytest.raises(ValueError, match="bad"):
            read()
    assert isinstance(f.exception(), ValueError)


def test_exception_returns_the_exception_without_raising_it():
    # A raise would give it a traceback holding the caller's frames for as long as the
    # future lives.
    f, e = Future(), ValueError("bad")
    f.set_exception(e)
    assert f.exception() is e and e.__traceback__ is None


def test_a_failed_wait_leaves_no_reference_to_the_future():
    # Its exception's traceback holds wait's frame: with ``self`` in it, the future and
    # its exception would hold each other until the next cyclic collection.
    f = Future()
    f.set_exception(ValueError("bad"))
    before = sys.getrefcount(f)
    with pytest.raises(ValueError):
        f.wait()
    assert sys.getrefcount(f) == before


def test_wait_blocks_until_another_thread_completes_it():
    f = Future()
    t0 = time.monotonic()
    _set_later(f, "late", 0.05)
    assert f.wait() == "late"
    assert time.monotonic() - t0 >= 0.04
    g = Future()
    _set_later(g, KeyError("k"))
    with pytest.raises(KeyError):
        g.value()


def test_wait_timeout():
    f = Future()
    with pytest.raises(TimeoutError, match=r"not done after 0\.01 seconds"):
        f.wait(timeout=0.01)
    with pytest.raises(TimeoutError):
        f.exception(timeout=0)
    assert not f.done()


def test_completing_twice_raises():
    for first, second in [("set_result", "set_result"), ("set_exception", "set_result")]:
        f = Future()
        getattr(f, first)(RuntimeError("x") if first == "set_exception" else 1)
        with pytest.raises(RuntimeError, match=r"already completed .*already set") as got:
            getattr(f, second)(2)
        assert "Future can only be marked completed once" in str(got.value)  # tensorplay's


def test_set_exception_needs_an_exception():
    with pytest.raises(TypeError, match="expected an exception, got str"):
        Future().set_exception("boom")  # type: ignore[arg-type]


# ------------------------------------------------------------------ callbacks
def test_add_done_callback_runs_once_in_order_and_late_ones_at_once():
    f = Future()
    seen = []
    f.add_done_callback(lambda fut: seen.append(("a", fut.value())))
    f.add_done_callback(lambda fut: seen.append(("b", fut.value())))
    assert seen == []
    f.set_result(1)
    f.add_done_callback(lambda fut: seen.append(("late", fut.value())))
    assert seen == [("a", 1), ("b", 1), ("late", 1)]


def test_a_raising_callback_is_logged_and_the_others_still_run(caplog):
    f = Future()
    seen = []
    f.add_done_callback(lambda fut: 1 / 0)
    f.add_done_callback(lambda fut: seen.append(fut.value()))
    with caplog.at_level(logging.ERROR, logger="tensorplay_jax.futures"):
        f.set_result(7)  # does not raise
    assert seen == [7]
    assert "a Future callback raised" in caplog.text and "ZeroDivisionError" in caplog.text


def test_callbacks_run_in_the_completing_thread():
    f = Future()
    where = []
    f.add_done_callback(lambda fut: where.append(threading.current_thread().name))
    t = threading.Thread(target=f.set_result, args=(0,), name="completer")
    t.start()
    t.join()
    assert where == ["completer"]


def test_callbacks_run_in_the_callback_executor():
    with ThreadPoolExecutor(1, thread_name_prefix="pool") as ex:
        f = Future(callback_executor=ex)
        where = Future()
        f.add_done_callback(lambda fut: where.set_result(threading.current_thread().name))
        f.set_result(0)
        assert where.wait(timeout=5).startswith("pool")
    # a shut-down executor: the callback runs in the completing thread
    g = Future(callback_executor=ex)
    seen = []
    g.add_done_callback(lambda fut: seen.append(fut.value()))
    g.set_result(5)
    assert seen == [5]


def test_run_callbacks_inline_when_overrides_the_executor():
    with ThreadPoolExecutor(1, thread_name_prefix="pool") as ex:
        mine = threading.get_ident()
        futures.run_callbacks_inline_when(lambda: threading.get_ident() == mine)
        try:
            f = Future(callback_executor=ex)
            where = []
            f.add_done_callback(lambda fut: where.append(threading.get_ident()))
            f.set_result(0)
            assert where == [mine]
        finally:
            futures.run_callbacks_inline_when(None)
    # RPC installs its rule when imported, and its future is this module's
    rpc_rule = futures._inline_here
    assert rpc_rule.__name__ == "on_reader_thread" or rpc_rule is futures._never


# ------------------------------------------------------------------ then
def test_then_chains_results_and_keeps_a_callbacks_error():
    f = Future()
    g = f.then(lambda fut: fut.value() * 2)
    h = g.then(lambda fut: fut.value() / 0)
    k = h.then(lambda fut: fut.value())
    ignored = h.then(lambda fut: "ran")
    f.set_result(21)
    assert g.wait() == 42
    with pytest.raises(CallbackError) as got:
        h.wait()
    assert isinstance(got.value.__cause__, ZeroDivisionError)
    with pytest.raises(CallbackError) as got:  # reading h's value in k's callback raises
        k.wait()
    assert isinstance(got.value.__cause__, CallbackError)
    assert ignored.wait() == "ran"  # a callback that does not read it runs as usual


# tensorplay: fut.wait() raises RuntimeError("Got the following error when running the
# callback: ValueError: boom\n\nAt: ..."), whatever the callback raised.
def test_a_callbacks_error_is_a_runtime_error_that_wraps_it():
    f = Future()

    def callback(fut):
        raise ValueError("boom")

    g = f.then(callback)
    f.set_result(1)
    with pytest.raises(RuntimeError) as got:
        g.wait()
    assert "Got the following error when running the callback: ValueError: boom" in str(got.value)
    assert type(got.value.__cause__) is ValueError and str(got.value.__cause__) == "boom"


@pytest.mark.parametrize("method", ["then", "add_done_callback"])
def test_a_callback_that_is_not_callable_is_a_type_error(method):
    with pytest.raises(TypeError, match="incompatible function arguments: callback must be"):
        getattr(Future(), method)(None)


def test_pickling_a_future_is_a_runtime_error():
    with pytest.raises(RuntimeError, match=r"Can not pickle torch\.futures\.Future") as got:
        pickle.dumps(Future())
    assert isinstance(got.value, TypeError)  # what pickling it raised before


def test_then_on_a_failed_future_sees_the_failure():
    f = Future()
    g = f.then(lambda fut: type(fut.exception()).__name__)
    f.set_exception(OSError("gone"))
    assert g.wait() == "OSError"


def test_then_across_threads_and_executor():
    with ThreadPoolExecutor(2) as ex:
        fs = [Future(callback_executor=ex) for _ in range(4)]
        outs = [f.then(lambda fut: fut.wait() + 1) for f in fs]
        for i, f in enumerate(fs):
            _set_later(f, i, 0.01 * i)
        assert [o.wait(timeout=5) for o in outs] == [1, 2, 3, 4]


# ------------------------------------------------------------------ drive
def test_drive_completes_the_future_in_the_waiting_thread():
    calls = []

    def drive(timeout):
        calls.append(timeout)
        f.set_result("driven")

    f = Future(drive=drive)
    child = f.then(lambda fut: fut.value().upper())
    assert child.wait(timeout=3) == "DRIVEN"  # the child drives its parent
    assert calls == [3] and f.done() and f.wait() == "driven"


def test_a_drive_that_does_not_complete_it_raises_instead_of_blocking():
    f = Future(drive=lambda timeout: None)
    assert not f.done()
    with pytest.raises(RuntimeError, match="not done, and nothing in this process will set it"):
        f.wait()


# ------------------------------------------------------------------ collect_all, wait_all
def test_collect_all_completes_when_all_complete():
    a, b = Future(), Future()
    both = collect_all([a, b])
    a.set_result(1)
    assert not both.done()
    b.set_result(2)
    got = both.wait()
    assert got[0] is a and got[1] is b and [f.value() for f in got] == [1, 2]
    assert collect_all([]).wait() == []


def test_collect_all_fails_at_the_first_failure():
    a, b = Future(), Future()
    both = collect_all([a, b])
    b.set_exception(ValueError("b failed"))
    assert both.done()  # a is still pending
    with pytest.raises(ValueError, match="b failed"):
        both.wait()
    a.set_result(1)  # later completions change nothing


def test_collect_all_across_threads():
    fs = [Future() for _ in range(8)]
    both = collect_all(fs)
    timers = [_set_later(f, i, 0.005 * i) for i, f in enumerate(fs)]
    assert [f.value() for f in both.wait(timeout=5)] == list(range(8))
    for t in timers:
        t.join()


def test_collect_all_drives_driven_futures():
    f = Future(drive=lambda timeout: f.set_result("p2p"))
    done = Future()
    done.set_result("ready")
    assert [x.value() for x in collect_all([done, f]).wait()] == ["ready", "p2p"]


def test_wait_all_returns_values_in_order_and_raises_the_first_failure():
    fs = [Future() for _ in range(3)]
    for i, f in enumerate(fs):
        _set_later(f, i, 0.01 * (3 - i))
    assert wait_all(fs) == [0, 1, 2]
    slow, bad = Future(), Future()
    bad.set_exception(KeyError("k"))
    t0 = time.monotonic()
    with pytest.raises(KeyError):
        wait_all([slow, bad])  # returns at once: it does not wait for slow
    assert time.monotonic() - t0 < 1
    slow.set_result(None)


def test_wait_all_does_not_need_the_callback_executor():
    """A pool whose threads all wait (an RPC handler calling wait_all) cannot deadlock it."""
    with ThreadPoolExecutor(1) as ex:
        blocker = threading.Event()
        ex.submit(blocker.wait)  # the pool's one thread is busy
        fs = [Future(callback_executor=ex) for _ in range(2)]
        for i, f in enumerate(fs):
            _set_later(f, i, 0.01)
        assert wait_all(fs) == [0, 1]
        blocker.set()
