"""Events of every worker merged into one Chrome-trace / Perfetto JSON document.

Each worker's recorder (``runtime.trace``) hands over one tuple per span, in
its own wall clock. :func:`merge` shifts them by the clock offset measured at
the start of the trace, puts worker ``r`` on process track ``r`` (named after
the worker) and each of its threads on a thread track, and expands each span
into Chrome's events: an ``X`` span; the ``s``/``f`` ends of its flow arrows
(send to serve, reply to caller; an arrow missing an end is left out); for an
RPC's send and reply spans, the ``b``/``e`` of the caller's whole call (an
async span). Times are microseconds from the earliest event; the origin's
wall-clock time is kept in ``otherData``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["WorkerEvents", "merge", "write"]


@dataclasses.dataclass
class WorkerEvents:
    """What one worker handed over: its events, thread names and clock offset.

    Attributes:
      rank: the worker's rank (its process track).
      name: the worker's name.
      events: ``runtime.trace`` span tuples (lists, after travelling over RPC).
      threads: native thread id -> thread name.
      offset_ns: this worker's clock minus the tracing worker's (subtracted).
      error_ns: half the round trip of the best offset measurement (its uncertainty).

    Example:
      >>> w = WorkerEvents(0, "w0", [["f", "user", 5_000, 2_000, 1, {}, None, None, 0]], {1: "m"})
      >>> [e["ph"] for e in merge([w])["traceEvents"] if e["ph"] == "X"]
      ['X']
    """

    rank: int
    name: str
    events: Sequence[Sequence[Any]]
    threads: dict[int, str]
    offset_ns: int = 0
    error_ns: int = 0


def merge(workers: Sequence[WorkerEvents], missing: dict[str, str] | None = None) -> dict:
    """One Chrome-trace document (``{"traceEvents": [...], ...}``) from every worker's events.

    Args:
      workers: what each worker handed over.
      missing: worker name -> why its events are not in (it died, did not answer).

    Returns:
      The document, ready for ``json.dump``; it opens in ui.perfetto.dev as it is.

    Example:
      >>> a = WorkerEvents(0, "a", [["send f", "rpc", 1000, 500, 7, {}, None, 42, 1]], {7: "m"})
      >>> b = WorkerEvents(1, "b", [["serve f", "rpc", 1300, 100, 9, {}, 42, None, 0]], {9: "p"})
      >>> doc = merge([a, b])
      >>> [(e["ph"], e["pid"], e["ts"]) for e in doc["traceEvents"] if e["ph"] in "sfb"]
      [('s', 0, 0.0), ('b', 0, 0.0), ('f', 1, 0.3)]
    """
    origin = min((int(e[2]) - w.offset_ns for w in workers for e in w.events), default=0)
    # An arrow with one end only (its other worker died, or its message crossed the
    # trace's start or end) would dangle in a viewer: left out.
    ends: dict[int, int] = {}
    for w in workers:
        for e in w.events:
            for ident in e[6:8]:
                if ident is not None:
                    ends[ident] = ends.get(ident, 0) + 1
    out: list[dict[str, Any]] = []
    for w in workers:
        out.append(_meta("process_name", w.rank, 0, {"name": f"{w.name} (rank {w.rank})"}))
        out.append(_meta("process_sort_index", w.rank, 0, {"sort_index": w.rank}))
        tids = set()
        for name, cat, ts, dur, tid, args, flow_in, flow_out, call in w.events:
            tids.add(tid)
            at = {"ts": (int(ts) - w.offset_ns - origin) / 1000, "pid": w.rank, "tid": tid}
            ev: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, **at, "dur": int(dur) / 1000}
            if args:
                ev["args"] = dict(args)
            out.append(ev)
            # Arrows: one name and category for all (they match by id), bound to this span.
            if flow_out is not None and ends[flow_out] == 2:
                out.append({"ph": "s", "name": "rpc", "cat": "rpc.flow", "id": flow_out, **at})
            if flow_in is not None and ends[flow_in] == 2:
                out.append(
                    {"ph": "f", "bp": "e", "name": "rpc", "cat": "rpc.flow", "id": flow_in, **at}
                )
            if call == 1:  # an RPC's send: the caller's call opens (an async span)
                b = {"ph": "b", "name": name.removeprefix("send "), "cat": "rpc", "id": flow_out}
                out.append({**b, **at, "args": ev.get("args", {})})
            elif call == -1 and flow_in is not None:  # its reply: the call closes
                e = {"ph": "e", "name": name.removeprefix("reply "), "cat": "rpc"}
                out.append({**e, "id": flow_in & ~1, **at})
        for tid in sorted(tids):
            out.append(_meta("thread_name", w.rank, tid, {"name": w.threads.get(tid, str(tid))}))
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "origin_unix_ns": origin,
            "workers": {
                w.name: {"rank": w.rank, "clock_offset_ns": w.offset_ns, "error_ns": w.error_ns}
                for w in workers
            },
            "missing": dict(missing or {}),
        },
    }


def write(doc: dict, path: str | os.PathLike) -> Path:
    """Write ``doc`` to ``path`` whole or not at all (a temporary file, then a rename).

    Example:
      >>> import tempfile
      >>> p = write(merge([]), Path(tempfile.mkdtemp()) / "t.json")
      >>> json.loads(p.read_text())["traceEvents"]
      []
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def _meta(name: str, pid: int, tid: int, args: dict) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}
