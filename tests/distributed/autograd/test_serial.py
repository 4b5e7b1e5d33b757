"""The per-context queue of local backward runs (``_serial``), in this process."""

from __future__ import annotations

import threading
import time

from tensorplay_jax.distributed.autograd._context import DistAutogradContext
from tensorplay_jax.distributed.autograd._serial import Serial, serial_for


def _wait_for(cond, what: str, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, f"not within {within_s}s: {what}"
        time.sleep(0.005)


def test_runs_submitted_while_one_runs_queue_in_order_and_the_submitter_returns():
    s = Serial()
    order: list[str] = []
    first_started, release = threading.Event(), threading.Event()

    def first() -> None:
        first_started.set()
        release.wait(10)
        order.append("first")

    th = threading.Thread(target=s.submit, args=(first,))
    th.start()
    assert first_started.wait(10)
    for name in ("second", "third"):
        s.submit(lambda name=name: order.append(name))  # returns at once: queued
    assert order == []
    release.set()
    _wait_for(lambda: len(order) == 3, "the queued runs")
    assert order == ["first", "second", "third"]


def test_a_submitter_returns_after_its_own_run_while_others_queued_behind_it_run():
    s = Serial()
    first_started, release_first, release_second = (threading.Event() for _ in range(3))
    order: list[str] = []

    def first() -> None:
        first_started.set()
        release_first.wait(10)
        order.append("first")

    def second() -> None:
        release_second.wait(10)
        order.append("second")

    th = threading.Thread(target=s.submit, args=(first,))
    th.start()
    assert first_started.wait(10)
    s.submit(second)  # another thread's run, queued behind the first
    release_first.set()
    th.join(10)
    assert not th.is_alive(), "the first submitter is still running the second run"
    assert order == ["first"]
    release_second.set()
    _wait_for(lambda: order == ["first", "second"], "the second run")


def test_a_run_submitted_from_a_run_goes_after_it_not_inside_it():
    s = Serial()
    order: list[str] = []

    def outer() -> None:
        s.submit(lambda: order.append("inner"))
        order.append("outer done")

    s.submit(outer)
    assert order == ["outer done", "inner"]


def test_a_run_that_raises_does_not_stop_the_queue(caplog):
    s = Serial()
    order: list[str] = []

    def bad() -> None:
        s.submit(lambda: order.append("after"))
        raise ValueError("boom")

    s.submit(bad)
    s.submit(lambda: order.append("later"))
    assert order == ["after", "later"]
    assert "a queued backward run raised" in caplog.text


def test_each_context_has_its_own_queue():
    a, b = DistAutogradContext(1), DistAutogradContext(2)
    assert serial_for(a) is serial_for(a)
    assert serial_for(a) is not serial_for(b)
