"""Events of every worker merged into one Chrome-trace / Perfetto JSON document.

Each worker's recorder (``runtime.trace``) hands over tuples in its own wall
clock. :func:`merge` shifts them by the clock offset measured at the start of
the trace, puts worker ``r`` on process track ``r`` (named after the worker)
and each of its threads on a thread track, and writes Chrome's phases as they
are: ``X`` spans, ``s``/``f`` flow arrows (send to serve, reply to caller;
an arrow missing an end is left out),
``b``/``e`` async spans (an RPC in flight on the caller). Times are
microseconds from the earliest event; the origin's wall-clock time is kept in
``otherData``.
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
      events: ``runtime.trace`` event tuples (lists, after travelling over RPC).
      threads: native thread id -> thread name.
      offset_ns: this worker's clock minus the tracing worker's (subtracted).
      error_ns: half the round trip of the best offset measurement (its uncertainty).

    Example:
      >>> w = WorkerEvents(0, "w0", [["X", "f", "user", 5_000, 2_000, 1, {}, 0]], {1: "main"})
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
      >>> a = WorkerEvents(0, "a", [["X", "send", "rpc", 1000, 500, 7, {}, 0],
      ...                           ["s", "send", "flow", 1000, 0, 7, None, 42]], {7: "main"})
      >>> b = WorkerEvents(1, "b", [["X", "serve", "rpc", 1300, 100, 9, {}, 0],
      ...                           ["f", "serve", "flow", 1300, 0, 9, None, 42]], {9: "pool"})
      >>> doc = merge([a, b])
      >>> [(e["ph"], e["pid"], e["ts"]) for e in doc["traceEvents"] if e["ph"] in "sf"]
      [('s', 0, 0.0), ('f', 1, 0.3)]
    """
    origin = min(
        (int(e[3]) - w.offset_ns for w in workers for e in w.events),
        default=0,
    )
    # An arrow with one end only (its other worker died, or its message crossed the
    # trace's start or end) would dangle in a viewer: left out.
    ends: dict[int, set[str]] = {}
    for w in workers:
        for e in w.events:
            if e[0] in ("s", "f"):
                ends.setdefault(e[7], set()).add(e[0])
    out: list[dict[str, Any]] = []
    for w in workers:
        out.append(_meta("process_name", w.rank, 0, {"name": f"{w.name} (rank {w.rank})"}))
        out.append(_meta("process_sort_index", w.rank, 0, {"sort_index": w.rank}))
        tids = set()
        for ph, name, cat, ts, dur, tid, args, ident in w.events:
            if ph in ("s", "f") and len(ends[ident]) < 2:
                continue
            tids.add(tid)
            ev: dict[str, Any] = {
                "ph": ph,
                "name": name,
                "cat": cat,
                "ts": (int(ts) - w.offset_ns - origin) / 1000,
                "pid": w.rank,
                "tid": tid,
            }
            if ph == "X":
                ev["dur"] = int(dur) / 1000
            if ph in "sf":  # one name and category for every arrow: they match by id
                ev["name"], ev["cat"], ev["id"] = "rpc", "rpc.flow", ident
                if ph == "f":
                    ev["bp"] = "e"
            if ph in "be":
                ev["id"] = ident
            if args:
                ev["args"] = dict(args)
            out.append(ev)
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
