"""profiler.trace over a real 3-worker job traced from the test process (``w0``): one file,
nested spans, flows, aligned times; and a process group's wait apart from its transfer."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict

import optax
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax import profiler, rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.testing import Workers
from tests._procs import reported
from tests._worker import error_text, expect
from tests.profiler import _workers as W

MOD = "tests.profiler._workers"


def _by_pid(doc: dict) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"].split(" ")[0]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def _spans(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _enclosing(doc: dict, ev: dict) -> dict:
    """The innermost span on ``ev``'s thread that holds ``ev``'s time (a flow's binding)."""
    holds = [
        s
        for s in _spans(doc)
        if (s["pid"], s["tid"]) == (ev["pid"], ev["tid"])
        and s["ts"] <= ev["ts"] <= s["ts"] + s["dur"]
    ]
    assert holds, ev
    return min(holds, key=lambda s: s["dur"])


def check_nesting(doc: dict) -> None:
    """On every thread, two spans are disjoint or one holds the other."""
    tracks = defaultdict(list)
    for s in _spans(doc):
        tracks[(s["pid"], s["tid"])].append((s["ts"], -s["dur"], s["name"]))
    for key, spans in tracks.items():
        stack: list[tuple[float, str]] = []  # (end, name)
        for ts, neg, name in sorted(spans):
            while stack and stack[-1][0] <= ts + 1e-3:  # adjacent (start-up phases), to
                stack.pop()  # the float round-off of microseconds computed from ns
            end = ts - neg
            assert not stack or end <= stack[-1][0] + 1e-3, (key, name, stack[-1])
            stack.append((end, name))


def flows(doc: dict) -> dict[int, dict[str, dict]]:
    """flow id -> {"s": start event, "f": end event}; every arrow has both ends."""
    out: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in doc["traceEvents"]:
        if e["ph"] in "sf":
            assert e["ph"] not in out[e["id"]], ("two ends of one kind", e)
            out[e["id"]][e["ph"]] = e
    return out


def arrow(doc: dict, src: str, send: str, dst: str, serve: str) -> list[int]:
    """The request arrows from a span ``send`` on ``src`` to a span ``serve`` on ``dst``."""
    names = _by_pid(doc)
    found = []
    for fid, ends in flows(doc).items():
        if fid & 1 or "s" not in ends or "f" not in ends:
            continue
        a, b = _enclosing(doc, ends["s"]), _enclosing(doc, ends["f"])
        if (names[a["pid"]], a["name"], names[b["pid"]], b["name"]) == (src, send, dst, serve):
            found.append(fid)
    return found


@pytest.fixture(scope="module")
def step(tmp_path_factory) -> dict:
    """A job of three workers (``w0`` is the test process) traced through one step: a
    nested RPC, a long reply, remote errors, remote/to_here/delete, a backward and an
    optimizer step. What each call returned, the trace file's document, the summary."""
    path = tmp_path_factory.mktemp("trace") / "step.json"
    got: dict = {}
    with Workers(3, names=["w0", "w1", "w2"]):
        tp.manual_seed(0)
        model = RemoteModule("w1", tp.nn.Linear, (4, 3))
        opt = DistributedOptimizer(optax.sgd(0.1), model.remote_parameters())
        x = tp.randn(2, 4)
        with profiler.trace(str(path), timeout=20) as t:
            with profiler.record_function("step", n=1):
                got["relay"] = rpc.rpc_sync("w1", W.relay, args=("w2",))
                got["big"] = len(rpc.rpc_sync("w2", W.big, args=(100_000,)))
                got["fail"] = error_text(rpc.rpc_sync, "w1", W.fail)
                got["unpicklable"] = error_text(
                    rpc.rpc_sync, "w1", W.add, args=(threading.Lock(), 1)
                )
                ref = rpc.remote("w2", W.add, args=(1, 2))
                got["to_here"] = ref.to_here()
                del ref
                with dist_autograd.context() as ctx:
                    dist_autograd.backward(ctx, [model(x).sum()])
                    opt.step(ctx)
            time.sleep(0.3)  # the RRef delete reaches w2 and is served while recording
        got["missing"] = t.missing
        got["table"] = t.summary().table(top=12)
    got["doc"] = json.loads(path.read_text())
    return got


@pytest.fixture(scope="module")
def step_doc(step) -> dict:
    return step["doc"]


def test_the_traced_step_ran_as_it_would_untraced(step):
    assert step["relay"] == 42 and step["big"] == 100_000 and step["to_here"] == 3, step
    assert step["fail"].startswith("ValueError") and "fails on purpose" in step["fail"], step
    assert step["unpicklable"] is not None, step  # an argument that cannot travel fails
    assert not step["missing"], step["missing"]


def test_one_file_with_every_worker(step_doc):
    doc = step_doc
    assert sorted(_by_pid(doc).values()) == ["w0", "w1", "w2"]
    assert doc["otherData"]["missing"] == {}
    for name in ("w1", "w2"):
        w = doc["otherData"]["workers"][name]
        assert abs(w["clock_offset_ns"]) < 50e6 and 0 < w["error_ns"] < 50e6, w
    names = {(_by_pid(doc)[s["pid"]], s["name"]) for s in _spans(doc)}
    for want in [
        ("w0", "step"),
        ("w0", f"send call {MOD}.relay"),
        ("w1", f"serve call {MOD}.relay"),
        ("w1", f"send call {MOD}.add"),
        ("w2", f"serve call {MOD}.add"),
        ("w0", f"send call {MOD}.fail"),
        ("w1", "send error"),
        ("w0", f"reply call {MOD}.fail"),
        ("w0", f"send remote {MOD}.add"),
        ("w2", f"serve remote {MOD}.add"),
        ("w0", "send to_here"),
        ("w2", "serve to_here"),
        ("w0", "send rref_delete"),
        ("w2", "serve rref_delete"),
        ("w0", "dist_autograd.backward"),
        ("w0", "dist_autograd: local"),
        ("w1", "dist_autograd: local"),
        ("w1", "dist_autograd: apply gradients"),
        ("w0", "DistributedOptimizer.step"),
        ("w1", "DistributedOptimizer.step (owner)"),
        *[(w, "init_rpc: rendezvous") for w in ("w0", "w1", "w2")],
    ]:
        assert want in names, (want, sorted(names))
    # start-up phases sit on the thread that called init_rpc (the driver's main thread)
    (step,) = [s for s in _spans(doc) if s["name"] == "step"]
    # (this job's: the test process may have joined other jobs before, whose phases stay)
    rdv = max(
        (s for s in _spans(doc) if s["name"] == "init_rpc: rendezvous" and s["pid"] == 0),
        key=lambda s: s["ts"],
    )
    assert rdv["tid"] == step["tid"] and rdv["ts"] + rdv["dur"] <= step["ts"]
    # payload bytes: the 100 kB reply of big() on both ends
    (sent,) = [s for s in _spans(doc) if s["name"] == "send reply" and s["args"]["bytes"] > 1e5]
    assert _by_pid(doc)[sent["pid"]] == "w2"
    (got,) = [s for s in _spans(doc) if s["name"] == f"reply call {MOD}.big"]
    assert got["args"]["bytes"] == sent["args"]["bytes"] and _by_pid(doc)[got["pid"]] == "w0"


def test_spans_nest_on_every_thread(step_doc):
    doc = step_doc
    check_nesting(doc)
    # the nested RPC: w1's send to w2 lies inside w1's serve of relay, on its thread
    names = _by_pid(doc)
    (serve,) = [s for s in _spans(doc) if s["name"] == f"serve call {MOD}.relay"]
    inner = [
        s for s in _spans(doc) if s["name"] == f"send call {MOD}.add" and names[s["pid"]] == "w1"
    ]
    assert len(inner) == 1 and inner[0]["tid"] == serve["tid"]
    assert (
        serve["ts"]
        <= inner[0]["ts"]
        <= inner[0]["ts"] + inner[0]["dur"]
        <= serve["ts"] + serve["dur"]
    )
    # the user's span holds the whole step on the driver's thread
    (step,) = [s for s in _spans(doc) if s["name"] == "step"]
    assert step["args"] == {"n": 1}
    for s in _spans(doc):  # (an RRef's delete may leave later, when the GC frees it)
        mine = names[s["pid"]] == "w0" and s["tid"] == step["tid"]
        if mine and s["name"].startswith("send") and s["name"] != "send rref_delete":
            assert step["ts"] <= s["ts"], (s, step)
            assert s["ts"] + s["dur"] <= step["ts"] + step["dur"], (s, step)


def test_flows_connect_the_right_pairs(step_doc):
    doc = step_doc
    names = _by_pid(doc)
    for fid, ends in flows(doc).items():
        assert set(ends) == {"s", "f"}, (fid, ends)
        s, f = ends["s"], ends["f"]
        caller = fid >> 41  # the rank that sent the request is in the id
        if fid & 1:  # a reply: from the callee's reply back to the caller
            assert f["pid"] == caller and s["pid"] != caller
            assert _enclosing(doc, s)["name"] in ("send reply", "send error")
            assert _enclosing(doc, f)["name"].startswith("reply ")
        else:
            assert s["pid"] == caller and f["pid"] != caller
            assert _enclosing(doc, s)["name"].startswith("send ")
            assert _enclosing(doc, f)["name"].startswith("serve ")
        assert s["ts"] <= f["ts"] + doc_error_us(doc, s, f), (fid, s, f)
    assert len(arrow(doc, "w0", f"send call {MOD}.relay", "w1", f"serve call {MOD}.relay")) == 1
    assert len(arrow(doc, "w1", f"send call {MOD}.add", "w2", f"serve call {MOD}.add")) == 1
    assert len(arrow(doc, "w0", f"send remote {MOD}.add", "w2", f"serve remote {MOD}.add")) == 1
    assert len(arrow(doc, "w0", "send to_here", "w2", "serve to_here")) == 1
    assert not arrow(doc, "w0", f"send call {MOD}.relay", "w2", f"serve call {MOD}.add")
    # the gradient message of the backward: from w0's pass to w1's apply
    grads = "tensorplay_jax.distributed.autograd._engine._apply_gradients"
    assert arrow(doc, "w0", f"send call {grads}", "w1", f"serve call {grads}")
    assert {names[p] for p in {0, 1, 2}} == {"w0", "w1", "w2"}


def doc_error_us(doc: dict, a: dict, b: dict) -> float:
    """How far two events' times on different workers may be off (the offsets' error, µs)."""
    err = {w: v["error_ns"] for w, v in doc["otherData"]["workers"].items()}
    names = _by_pid(doc)
    return (err[names[a["pid"]]] + err[names[b["pid"]]]) / 1000


def test_a_serve_lies_within_its_call(step_doc):
    doc = step_doc
    calls = {}
    ends = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "b":
            calls[e["id"]] = e
        elif e["ph"] == "e":
            ends[e["id"]] = e
    checked = 0
    for fid, fl in flows(doc).items():
        if fid & 1 or fid not in calls:
            continue
        serve = _enclosing(doc, fl["f"])
        reply = flows(doc)[fid | 1]["s"]  # the callee's reply leaves before the caller has it
        tol = doc_error_us(doc, calls[fid], serve)
        assert calls[fid]["ts"] - tol <= serve["ts"], (calls[fid], serve)
        assert serve["ts"] <= reply["ts"] <= ends[fid]["ts"] + tol, (serve, reply, ends[fid])
        assert calls[fid]["pid"] == fid >> 41 and serve["pid"] != calls[fid]["pid"]
        checked += 1
    assert checked >= 8


def test_summary_table(step_doc, step):
    doc, printed = step_doc, step["table"]
    summary = profiler.summarize(doc)
    (relay,) = summary.by_name(f"serve call {MOD}.relay")
    assert relay.worker == "w1" and relay.calls == 1 and relay.bytes > 0
    assert relay.mean_ms >= 2.0  # it sleeps 2 ms
    (call,) = summary.by_name(f"call {MOD}.relay")  # the caller's whole call
    # the call holds the 2 ms sleep too (not the serve's whole span: that ends after the
    # reply is handed to the link, which may be after the caller has it)
    assert call.worker == "w0" and call.total_ms >= 2.0
    assert "worker" in printed and "serve call" in printed  # the table it prints


def test_killed_worker_still_leaves_a_readable_file(tmp_path):
    # w2 is killed while w0 (the test process) traces: the file holds w0's and w1's events
    path = tmp_path / "killed.json"
    with Workers(3, names=["w0", "w1", "w2"], timeout=10) as w:
        with profiler.trace(str(path), timeout=5) as t:
            assert rpc.rpc_sync("w1", W.add, args=(1, 1)) == 2
            assert rpc.rpc_sync("w2", W.add, args=(2, 2)) == 4
            w.kill("w2")
            expect(Exception, ["w2"], rpc.rpc_sync, "w2", W.add, args=(1, 1), timeout=3)
            assert rpc.rpc_sync("w1", W.add, args=(3, 3)) == 6
        assert set(t.missing) == {"w2"}, t.missing
    doc = json.loads(path.read_text())
    assert sorted(_by_pid(doc).values()) == ["w0", "w1"]
    assert "w2" in doc["otherData"]["missing"]
    check_nesting(doc)
    names = {(_by_pid(doc)[s["pid"]], s["name"]) for s in _spans(doc)}
    assert ("w1", f"serve call {MOD}.add") in names and ("w0", f"send call {MOD}.add") in names


@pytest.mark.parametrize("engine", ["shm", "xla", "tcp"])
def test_collective_wait_apart_from_transfer(workers, engine):
    # rank 0 arrives 0.3 s late: rank 1's trace shows the wait inside its all_reduce
    res = workers(W.collective_wait, 2, args=[engine], timeout=180)
    got = [reported(r) for r in res]
    for rank, g in enumerate(got):
        assert g["value"] == 3.0, (rank, g)
        assert g["call"]["args"]["bytes"] == 1024 and g["call"]["args"]["shape"] == [256], g
    call, wait = got[1]["call"], got[1]["wait"]
    assert wait is not None and wait["dur"] >= 0.2e6, got[1]  # µs: it waited for rank 0
    assert call["ts"] <= wait["ts"] and wait["ts"] + wait["dur"] <= call["ts"] + call["dur"]
    assert call["dur"] - wait["dur"] < 0.2e6, got[1]  # the transfer itself is short
