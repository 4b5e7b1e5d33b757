"""profiler's merge and summary on hand-made events (no processes): offsets, flows, table."""

from __future__ import annotations

import json

import pytest

from tensorplay_jax import profiler
from tensorplay_jax.profiler import WorkerEvents


def _two_workers():
    # w1's clock runs 1 ms (1e6 ns) ahead of w0's. Span tuples as runtime.trace keeps them:
    # (name, cat, t0, dur, tid, args, flow_in, flow_out, call).
    w0 = WorkerEvents(
        0,
        "w0",
        [
            ["send call f", "rpc", 10_000, 1_000, 5, {"bytes": 40}, None, 2, 1],
            ["reply call f", "rpc", 29_000, 1_000, 6, {"bytes": 8}, 3, None, -1],
            ["send call g", "rpc", 40_000, 1_000, 5, {}, None, 8, 1],  # its serve is not here
        ],
        {5: "MainThread", 6: "reader"},
    )
    w1 = WorkerEvents(
        1,
        "w1",
        [
            ["serve call f", "rpc", 1_012_000, 15_000, 9, {"bytes": 40}, 2, None, 0],
            ["send reply", "rpc", 1_025_000, 1_000, 9, {"bytes": 8}, None, 3, 0],
        ],
        {9: "tpj-rpc-worker"},
        offset_ns=1_000_000,
        error_ns=500,
    )
    return [w0, w1]


def test_merge_aligns_clocks_and_keeps_matched_flows(tmp_path):
    doc = profiler.merge(_two_workers(), {"w2": "no events: died"})
    ev = doc["traceEvents"]
    serve = next(e for e in ev if e["name"] == "serve call f")
    send = next(e for e in ev if e["name"] == "send call f" and e["ph"] == "X")
    assert send["ts"] == 0.0 and serve["ts"] == 2.0 and serve["dur"] == 15.0  # µs, aligned
    flows = sorted((e["ph"], e["pid"], e["id"]) for e in ev if e["ph"] in "sf")
    assert flows == [("f", 0, 3), ("f", 1, 2), ("s", 0, 2), ("s", 1, 3)]  # id 8 dangled: out
    assert all(e["bp"] == "e" for e in ev if e["ph"] == "f")
    calls = sorted((e["ph"], e["name"], e["id"], e["ts"]) for e in ev if e["ph"] in "be")
    assert calls == [("b", "call f", 2, 0.0), ("b", "call g", 8, 30.0), ("e", "call f", 2, 19.0)]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert names == {(0, 5): "MainThread", (0, 6): "reader", (1, 9): "tpj-rpc-worker"}
    assert doc["otherData"]["missing"] == {"w2": "no events: died"}
    assert doc["otherData"]["workers"]["w1"]["clock_offset_ns"] == 1_000_000
    path = profiler._chrome.write(doc, tmp_path / "t.json")
    assert json.loads(path.read_text()) == doc
    assert not list(tmp_path.glob(".*tmp"))


def test_summary_rows_and_table():
    s = profiler.summarize(profiler.merge(_two_workers()))
    rows = {(r.worker, r.name): r for r in s}
    call = rows[("w0", "call f")]  # the caller's whole call: b (send) to e (reply)
    assert call.calls == 1 and call.total_ms == pytest.approx(0.019) and call.bytes == 40
    assert ("w0", "call g") not in rows  # no reply: no duration
    serve = rows[("w1", "serve call f")]
    assert serve.mean_ms == pytest.approx(0.015) and serve.p99_ms == pytest.approx(0.015)
    text = s.table(sort_by="total_ms")
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["worker", "name", "calls"]
    assert lines[1].startswith("w0") and "call f" in lines[1]  # largest total first
    assert str(s) == s.table() and len(s) == len(rows)


def test_p99_of_many_calls():
    spans = [
        {"ph": "X", "name": "f", "pid": 0, "tid": 1, "ts": i, "dur": 1000.0 * (i + 1)}
        for i in range(200)
    ]
    doc = {"traceEvents": spans}
    (row,) = profiler.summarize(doc)
    assert row.calls == 200 and row.p99_ms == 198.0 and row.mean_ms == pytest.approx(100.5)


def test_local_trace_without_rpc(tmp_path):
    path = tmp_path / "local.json"
    with (
        profiler.trace(path) as t,
        profiler.record_function("outer"),
        profiler.record_function("inner", i=3),
    ):
        pass
    doc = json.loads(path.read_text())
    xs = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    o, i = xs["outer"], xs["inner"]
    assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] and i["args"] == {"i": 3}
    assert t.summary().by_name("inner")[0].calls == 1
    with pytest.raises(RuntimeError, match="already recording"), profiler.trace(), profiler.trace():
        pass
