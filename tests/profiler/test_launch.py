"""Start-up phases of workers a launcher started: in the trace, in order, before their work."""

from __future__ import annotations

import itertools

import pytest

from tensorplay_jax import profiler
from tests.profiler import _workers as W

PHASES = [
    "launch: start python, import jax",
    "launch: imports, script until init_rpc",
    "init_rpc: store and servers",
    "init_rpc: rendezvous",
]


@pytest.mark.workers(2)
def test_launched_worker_keeps_its_start_up(dist_workers):
    with profiler.trace() as t:
        assert dist_workers.run("worker1", W.add, 1, 2) == 3
    doc = t.document
    pids = {
        e["args"]["name"].split(" ")[0]: e["pid"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    mine = {s["name"]: s for s in spans if s["pid"] == pids["worker1"] and s["name"] in PHASES}
    assert sorted(mine) == sorted(PHASES), sorted(mine)
    # one after the other, each where the one before ended (times in microseconds)
    for a, b in itertools.pairwise(PHASES):
        end = mine[a]["ts"] + mine[a]["dur"]
        assert abs(end - mine[b]["ts"]) < 1, (a, b, end, mine[b]["ts"])
        assert mine[a]["dur"] >= 0
    # starting python and importing jax takes a while; it happened before the worker served
    assert mine[PHASES[0]]["dur"] > 50_000, mine[PHASES[0]]
    (serve,) = [s for s in spans if s["name"] == f"serve call {W.__name__}.add"]
    assert mine[PHASES[-1]]["ts"] + mine[PHASES[-1]]["dur"] <= serve["ts"]
    # the test process joined by hand (no launcher): no launch phases of its own
    assert not [s for s in spans if s["pid"] == pids["worker0"] and s["name"].startswith("launch:")]
