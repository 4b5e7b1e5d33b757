"""The summary table of a trace: per worker and span name, calls, times and bytes.

Like ``key_averages()`` of tensorplay's profiler: :func:`summarize` groups the
spans of a merged trace by (worker, name) and :class:`Summary` prints them as
a table or hands them over as rows. An RPC's caller-side time (its async span,
send to reply) is a row too, named after the call (``call mod.fn``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

__all__ = ["Row", "Summary", "summarize"]


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the summary: a span name on one worker.

    Example:
      >>> Row("w0", "serve call f", 2, 3.0, 1.5, 2.0, 64).mean_ms
      1.5
    """

    worker: str
    name: str
    calls: int
    total_ms: float
    mean_ms: float
    p99_ms: float
    bytes: int


@dataclasses.dataclass
class Summary:
    """The rows of a trace's summary; ``str()`` (or :meth:`table`) prints them.

    Example:
      >>> s = Summary([Row("w0", "serve call f", 2, 3.0, 1.5, 2.0, 64)])
      >>> print(s.table())  # doctest: +NORMALIZE_WHITESPACE
      worker  name          calls  total ms  mean ms  p99 ms  bytes
      w0      serve call f      2     3.000    1.500   2.000     64
    """

    rows: list[Row]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        return self.table()

    def table(self, sort_by: str = "total_ms", top: int | None = None) -> str:
        """The rows as a text table, largest ``sort_by`` first (at most ``top`` rows)."""
        rows = sorted(self.rows, key=lambda r: getattr(r, sort_by), reverse=True)[:top]
        head = ["worker", "name", "calls", "total ms", "mean ms", "p99 ms", "bytes"]
        body = [
            [r.worker, r.name, str(r.calls), f"{r.total_ms:.3f}", f"{r.mean_ms:.3f}",
             f"{r.p99_ms:.3f}", str(r.bytes)]
            for r in rows
        ]  # fmt: skip
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
        lines = []
        for cells in [head, *body]:
            left = [c.ljust(w) for c, w in zip(cells[:2], widths[:2], strict=True)]
            right = [c.rjust(w) for c, w in zip(cells[2:], widths[2:], strict=True)]
            lines.append("  ".join(left + right).rstrip())
        return "\n".join(lines)

    def by_name(self, name: str) -> list[Row]:
        """The rows of one span name, one per worker that recorded it."""
        return [r for r in self.rows if r.name == name]


def summarize(doc: dict[str, Any], *, startup: bool = False) -> Summary:
    """The :class:`Summary` of a merged trace document (see ``_chrome.merge``).

    Start-up phases (``launch: ...``, ``init_rpc: ...``, category ``startup``) happen
    once, before any step: they are in the file's timeline and left out of the table
    unless ``startup`` is true.

    Example:
      >>> doc = {"traceEvents": [
      ...     {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "w0"}},
      ...     {"ph": "X", "name": "f", "pid": 0, "tid": 1, "ts": 0, "dur": 1000.0},
      ...     {"ph": "X", "name": "f", "pid": 0, "tid": 1, "ts": 5, "dur": 3000.0,
      ...      "args": {"bytes": 8}}]}
      >>> [(r.worker, r.name, r.calls, r.total_ms, r.bytes) for r in summarize(doc)]
      [('w0', 'f', 2, 4.0, 8)]
    """
    names: dict[int, str] = {}
    durs: dict[tuple[int, str], list[float]] = defaultdict(list)
    nbytes: dict[tuple[int, str], int] = defaultdict(int)
    opened: dict[tuple[int, Any], dict[str, Any]] = {}
    for e in doc["traceEvents"]:
        ph, pid = e["ph"], e["pid"]
        if ph == "M" and e["name"] == "process_name":
            names[pid] = e["args"]["name"].split(" (rank")[0]
        elif ph == "X" and (startup or e.get("cat") != "startup"):
            key = (pid, e["name"])
            durs[key].append(e["dur"])
            nbytes[key] += int(e.get("args", {}).get("bytes", 0))
        elif ph == "b":
            opened[(pid, e["id"])] = e
        elif ph == "e" and (pid, e["id"]) in opened:
            b = opened.pop((pid, e["id"]))
            key = (pid, b["name"])
            durs[key].append(e["ts"] - b["ts"])
            nbytes[key] += int(b.get("args", {}).get("bytes", 0))
    rows = []
    for (pid, name), ds in sorted(durs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ds = sorted(ds)
        total = sum(ds) / 1000
        p99 = ds[min(len(ds) - 1, math.ceil(0.99 * len(ds)) - 1)] / 1000
        worker = names.get(pid, str(pid))
        rows.append(Row(worker, name, len(ds), total, total / len(ds), p99, nbytes[(pid, name)]))
    return Summary(rows)
