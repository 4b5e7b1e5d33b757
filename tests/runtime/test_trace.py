"""runtime.trace, the profiler's recorder: nothing when off, spans and flows when on."""

from __future__ import annotations

import threading
import time

import pytest

from tensorplay_jax.runtime import trace


@pytest.fixture(autouse=True)
def _clean():
    trace.stop()
    trace.drain()
    yield
    trace.stop()
    trace.drain()


def _user(events):
    return [e for e in events if e[1] != "startup"]


def test_off_records_nothing():
    with trace.span("a", "user"):
        pass
    assert _user(trace.drain()) == []


def test_span_flows_and_threads():
    trace.start()
    s = trace.begin("send", "rpc", flow_in=3)
    s.end(flow_out=4, bytes=8)

    def other():
        with trace.span("worker side", "user", k=1):
            pass

    th = threading.Thread(target=other, name="side-thread")
    th.start()
    th.join(timeout=10)
    trace.stop()
    ev = _user(trace.drain())
    by = {e[0]: e for e in ev}
    send = by["send"]
    assert send[1] == "rpc" and send[3] >= 0 and send[5] == {"bytes": 8}
    assert send[6:] == (3, 4, 0)  # the arrows that end and start here; not a call
    side = by["worker side"]
    assert side[4] != send[4] and side[5] == {"k": 1} and side[6:] == (None, None, 0)
    assert trace.thread_names()[side[4]] == "side-thread"


def test_rpc_call_marks():
    trace.start()
    trace.begin("send call f", "rpc").end(8, 1, to="w1")
    trace.begin("reply call f", "rpc", 9).end(None, -1, ok=True)
    trace.stop()
    assert [e[6:] for e in _user(trace.drain())] == [(None, 8, 1), (9, None, -1)]


def test_settle_waits_for_a_span_another_thread_closes_after_stop():
    # a callee's serve: its reply is out (the trace stops) before its span closes
    trace.start()
    opened, release = threading.Event(), threading.Event()

    def serve():
        s = trace.begin("late", "user")
        opened.set()
        release.wait(5)
        time.sleep(0.05)
        s.end()

    t = threading.Thread(target=serve)
    t.start()
    opened.wait(5)
    trace.stop()
    assert trace.settle(timeout=0.01) is False  # still open: bounded wait, then give up
    release.set()
    t0 = time.monotonic()
    assert trace.settle(timeout=5) is True
    assert time.monotonic() - t0 >= 0.04
    assert [e[0] for e in _user(trace.drain())] == ["late"]
    t.join()


def test_spans_open_on_this_thread_do_not_hold_settle_and_a_late_span_is_cleared():
    trace.start()
    mine = trace.begin("mine", "user")
    trace.stop()
    t0 = time.monotonic()
    assert trace.settle(timeout=2) is True and time.monotonic() - t0 < 1
    assert _user(trace.drain()) == []
    mine.end()  # after the drain: left for the next trace's start to clear
    trace.clear()
    assert _user(trace.drain()) == []


def test_startup_phases_are_kept_while_off_and_handed_over_once():
    trace.startup("init_rpc: rendezvous", 10, 30, world_size=2)
    (e,) = [e for e in trace.drain() if e[0] == "init_rpc: rendezvous"]
    assert e[:4] == ("init_rpc: rendezvous", "startup", 10, 20) and e[5] == {"world_size": 2}
    assert e[4] == threading.get_native_id()
    assert not [e for e in trace.drain() if e[0] == "init_rpc: rendezvous"]


def test_flow_ids_are_unique_and_carry_the_rank():
    ids = {trace.flow_id(r, m, rep) for r in (0, 1, 4095) for m in (1, 2, 2**40 - 1)
           for rep in (False, True)}  # fmt: skip
    assert len(ids) == 18 and max(ids) < 2**53  # exact in JSON readers
    assert trace.flow_id(7, 99) >> 41 == 7 and trace.flow_id(7, 99, reply=True) & 1


def test_spans_are_jax_trace_annotations(tmp_path):
    """A jax.profiler.trace run holds our span among XLA's events."""
    import jax
    import jax.numpy as jnp

    trace.start()
    with jax.profiler.trace(str(tmp_path)), trace.span("tpj-annotated-span", "user"):
        jnp.ones(3).block_until_ready()
    trace.stop()
    files = [p for p in tmp_path.rglob("*.xplane.pb")]
    assert files and any(b"tpj-annotated-span" in p.read_bytes() for p in files)
