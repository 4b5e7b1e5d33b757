"""runtime.trace, the profiler's recorder: nothing when off, spans and flows when on."""

from __future__ import annotations

import threading

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
    return [e for e in events if e[2] != "startup"]


def test_off_records_nothing():
    with trace.span("a", "user"):
        pass
    trace.async_begin("b", "rpc", 1)
    trace.async_end("b", "rpc", 1)
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
    by = {(e[0], e[1]): e for e in ev}
    x = by[("X", "send")]
    assert x[6] == {"bytes": 8} and x[4] >= 0
    assert by[("f", "send")][7] == 3 and by[("s", "send")][7] == 4
    assert by[("f", "send")][3] == x[3] == by[("s", "send")][3]  # both bind to the span
    side = by[("X", "worker side")]
    assert side[5] != x[5] and side[6] == {"k": 1}
    assert trace.thread_names()[side[5]] == "side-thread"


def test_a_span_that_ends_after_stop_is_dropped():
    trace.start()
    s = trace.begin("late", "user")
    trace.stop()
    s.end()
    assert _user(trace.drain()) == []


def test_startup_phases_are_kept_while_off_and_handed_over_once():
    trace.startup("init_rpc: rendezvous", 10, 30, world_size=2)
    (e,) = [e for e in trace.drain() if e[1] == "init_rpc: rendezvous"]
    assert e[:5] == ("X", "init_rpc: rendezvous", "startup", 10, 20) and e[6] == {"world_size": 2}
    assert not [e for e in trace.drain() if e[1] == "init_rpc: rendezvous"]


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
