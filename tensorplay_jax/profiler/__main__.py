"""``python -m tensorplay_jax.profiler TRACE.json``: a saved trace's summary table, or its picture.

For a trace written on a cluster host with no browser: print the table of
every worker and span (calls, total, mean and p99 time, bytes), and with
``--plot out.png`` draw the timeline (matplotlib) to a file.

Example::

    python -m tensorplay_jax.profiler step.json --top 15
    python -m tensorplay_jax.profiler step.json --plot step.png --window 120 180
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tensorplay_jax.profiler._plot import plot
from tensorplay_jax.profiler._summary import summarize


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorplay_jax.profiler", description=__doc__)
    p.add_argument("trace", help="a JSON file written by profiler.trace(path)")
    p.add_argument("--top", type=int, default=None, help="only the N spans of most total time")
    p.add_argument("--plot", metavar="PNG", help="draw the timeline to this image file")
    p.add_argument("--window", type=float, nargs=2, metavar=("START_MS", "END_MS"))
    p.add_argument("--startup", action="store_true", help="keep start-up phases in the table")
    a = p.parse_args(argv)
    with open(a.trace) as f:
        doc = json.load(f)
    if "traceEvents" not in doc:
        p.error(f"{a.trace}: not a trace (no traceEvents); write one with profiler.trace(path)")
    print(summarize(doc, startup=a.startup).table(top=a.top))
    missing = doc.get("otherData", {}).get("missing", {})
    for name, why in missing.items():
        print(f"missing: {name}: {why}")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        ax = plot(doc, window_ms=tuple(a.window) if a.window else None)
        ax.figure.tight_layout()
        ax.figure.savefig(a.plot, dpi=120)
        print(f"wrote {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
