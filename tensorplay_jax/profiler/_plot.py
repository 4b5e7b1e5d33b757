"""A merged trace drawn with matplotlib: for notebooks and hosts that cannot reach Perfetto.

One row per worker thread (workers in rank order), one bar per span, nested
spans stacked inside their row, coloured by what recorded them (RPC,
distributed autograd, the optimizer, process groups, your ``record_function``
blocks, start-up), and the RPC arrows from each send to its serve and from each
reply back. Times are milliseconds from the trace's first event, as Perfetto
shows them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

__all__ = ["plot"]

_DOTTED = re.compile(r"\w+(?:\.[\w<>]+){2,}")  # a module path: a.b.f

COLORS = {
    "rpc": "tab:blue",
    "autograd": "tab:orange",
    "optim": "tab:green",
    "pg": "tab:red",
    "user": "tab:purple",
    "startup": "tab:gray",
}


def plot(
    document: dict[str, Any],
    *,
    ax: Any = None,
    window_ms: tuple[float, float] | None = None,
    flows: bool = True,
    min_us: float = 0.0,
    labels: bool = True,
) -> Any:
    """Draw a merged trace (``trace.document`` or the JSON file, loaded) as a timeline.

    Args:
      document: the merged trace, ``{"traceEvents": [...], ...}``.
      ax: the matplotlib Axes to draw on; a new figure when None.
      window_ms: ``(start, end)`` in ms from the trace's start; default: all of it.
      flows: draw the RPC arrows (send to serve, reply back to the caller).
      min_us: leave out spans shorter than this many microseconds.
      labels: write each span's name on it where it is wide enough.

    Returns:
      The Axes.

    Raises:
      ImportError: matplotlib is not installed (``pip install matplotlib``).

    Example:
      >>> import matplotlib
      >>> matplotlib.use("Agg")
      >>> from tensorplay_jax import profiler
      >>> with profiler.trace() as t:
      ...     with profiler.record_function("step"):
      ...         pass
      >>> ax = profiler.plot(t.document)
      >>> ax.get_xlabel()
      'ms from the start of the trace'
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - matplotlib is in the test extra
        raise ImportError("profiler.plot draws with matplotlib: pip install matplotlib") from e
    events = document["traceEvents"]
    lo, hi = window_ms if window_ms is not None else (-float("inf"), float("inf"))
    spans = [
        e
        for e in events
        if e["ph"] == "X"
        and e["dur"] >= min_us
        and e["ts"] / 1e3 <= hi
        and (e["ts"] + e["dur"]) / 1e3 >= lo
    ]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    rows, depth = _rows(spans)
    if ax is None:
        height = 0.5 + 0.45 * sum(rows.values())
        _, ax = plt.subplots(figsize=(12, min(max(height, 2.5), 14)))
    # y: each row gets one lane per nesting level, rows top to bottom in rank order
    base: dict[tuple[int, int], float] = {}
    y = 0.0
    ticks, names = [], []
    for key in sorted(rows, key=lambda k: (k[0], min(s["ts"] for s in spans if _key(s) == k))):
        base[key] = y
        ticks.append(y + rows[key] / 2)
        pname = procs.get(key[0], str(key[0])).split(" ")[0]
        names.append(f"{pname} / {threads.get(key, key[1])}")
        y += rows[key] + 0.4
    x0 = max(lo, min((s["ts"] / 1e3 for s in spans), default=0.0))
    x1 = min(hi, max(((s["ts"] + s["dur"]) / 1e3 for s in spans), default=1.0))
    width = max(x1 - x0, 1e-6)
    bars: dict[tuple[float, str], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        lane = base[_key(s)] + depth[id(s)]
        bars[(lane, s["cat"])].append((s["ts"] / 1e3, max(s["dur"] / 1e3, width * 1e-4)))
        fits = int(min(s["dur"] / 1e3, x1 - s["ts"] / 1e3) / width * 150)  # ~chars at 7 pt
        if labels and fits >= 8:
            name = _DOTTED.sub(lambda m: m.group(0).rsplit(".", 1)[1], s["name"])  # f, not a.b.f
            name = name if len(name) <= fits else name[: fits - 1] + "…"
            left = max(s["ts"] / 1e3, x0)
            ax.text(left, lane + 0.45, " " + name, va="center", fontsize=7, clip_on=True)
    for (lane, cat), xs in bars.items():
        ax.broken_barh(xs, (lane + 0.05, 0.8), color=COLORS.get(cat, "tab:cyan"), alpha=0.85)
    if flows:
        by_row: dict[tuple[int, int], list[dict]] = defaultdict(list)
        for sp in spans:
            by_row[_key(sp)].append(sp)

        def lane_at(e: dict) -> float:  # the innermost span the arrow's end is bound to
            holds = [d for d in by_row[_key(e)] if d["ts"] <= e["ts"] <= d["ts"] + d["dur"]]
            return base[_key(e)] + max((depth[id(d)] for d in holds), default=0) + 0.45

        _arrows(ax, events, base, lo, hi, lane_at)
    for cat, color in COLORS.items():
        if any(s["cat"] == cat for s in spans):
            ax.broken_barh([], (0, 0), color=color, label=cat)
    ax.set_xlim(x0 - 0.01 * width, x1 + 0.01 * width)
    ax.set_ylim(y, -0.2)
    ax.set_yticks(ticks, names, fontsize=8)
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    ax.set_xlabel("ms from the start of the trace")
    if spans:
        ax.legend(loc="lower right", fontsize=7, ncol=len(COLORS))
    return ax


def _key(e: dict) -> tuple[int, int]:
    return (e["pid"], e["tid"])


def _rows(spans: list[dict]) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """Lanes per thread row and each span's nesting depth inside its row."""
    by_row: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for s in spans:
        by_row[_key(s)].append(s)
    rows, depth = {}, {}
    for key, ss in by_row.items():
        stack: list[float] = []  # ends of the open spans
        deepest = 0
        for s in sorted(ss, key=lambda s: (s["ts"], -s["dur"])):
            while stack and stack[-1] <= s["ts"]:
                stack.pop()
            depth[id(s)] = len(stack)
            deepest = max(deepest, len(stack))
            stack.append(s["ts"] + s["dur"])
        rows[key] = deepest + 1
    return rows, depth


def _arrows(ax: Any, events: list[dict], base: dict, lo: float, hi: float, lane_at: Any) -> None:
    ends: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            ends[e["id"]][e["ph"]] = e
    drawn = 0
    for pair in ends.values():
        s, f = pair.get("s"), pair.get("f")
        if s is None or f is None or _key(s) not in base or _key(f) not in base:
            continue
        if not (lo <= s["ts"] / 1e3 <= hi and lo <= f["ts"] / 1e3 <= hi):
            continue
        ax.annotate(
            "",
            xy=(f["ts"] / 1e3, lane_at(f)),
            xytext=(s["ts"] / 1e3, lane_at(s)),
            arrowprops={"arrowstyle": "->", "color": "0.25", "lw": 0.6, "alpha": 0.6},
        )
        drawn += 1
        if drawn >= 400:  # a readable picture; Perfetto shows them all
            return
