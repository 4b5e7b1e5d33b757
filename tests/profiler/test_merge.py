"""profiler's merge and summary on hand-made events (no processes): offsets, flows, table."""

from __future__ import annotations

import json

import pytest

from tensorplay_jax import profiler
from tensorplay_jax.profiler import WorkerEvents


def _two_workers():
    # w1's clock runs 1 ms (1e6 ns) ahead of w0's.
    w0 = WorkerEvents(
        0,
        "w0",
        [
            ["X", "send call f", "rpc", 10_000, 1_000, 5, {"bytes": 40}, 0],
            ["s", "send call f", "flow", 10_000, 0, 5, None, 2],
            ["b", "call f", "rpc", 10_000, 0, 5, {"bytes": 40}, 2],
            ["e", "call f", "rpc", 30_000, 0, 6, {}, 2],
            ["X", "reply f", "rpc", 29_000, 1_000, 6, {"bytes": 8}, 0],
            ["f", "reply f", "flow", 29_000, 0, 6, None, 3],
            ["s", "send call g", "flow", 40_000, 0, 5, None, 8],  # its serve is not here
        ],
        {5: "MainThread", 6: "reader"},
    )
    w1 = WorkerEvents(
        1,
        "w1",
        [
            ["X", "serve call f", "rpc", 1_012_000, 15_000, 9, {"bytes": 40}, 0],
            ["f", "serve call f", "flow", 1_012_000, 0, 9, None, 2],
            ["X", "send reply", "rpc", 1_025_000, 1_000, 9, {"bytes": 8}, 0],
            ["s", "send reply", "flow", 1_025_000, 0, 9, None, 3],
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
    call = rows[("w0", "call f")]  # the caller's whole call: b to e
    assert call.calls == 1 and call.total_ms == pytest.approx(0.02) and call.bytes == 40
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
