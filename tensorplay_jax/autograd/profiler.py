"""``tensorplay.autograd.profiler``: what ran in this process inside a block, as events.

``profile()`` records this process's spans (the recorder of ``runtime.trace``, which
``tensorplay_jax.profiler`` merges across workers) while the block runs and hands them
over as ``function_events``: one :class:`FunctionEvent` per span, its time in
microseconds. A process-group collective is named as tensorplay's are,
``"<backend>:<collective>"`` (``"gloo:all_reduce"``; a point-to-point call
``"gloo:send"`` or ``"gloo:recv"``, ``isend``/``irecv`` too), asynchronous, with its
input's shape when ``record_shapes=True``; RPC and user spans (``record_function``) keep their
names. For a job-wide timeline use ``tensorplay_jax.profiler.trace``; inside one, this
profiler reads the same spans without taking them from it.

Example:
  >>> from tensorplay_jax.autograd import profiler
  >>> with profiler.profile(record_shapes=True) as prof:
  ...     with profiler.record_function("step"):
  ...         pass
  >>> [(e.name, e.count) for e in prof.function_events]
  [('step', 1)]
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from tensorplay_jax.runtime import trace

__all__ = ["FunctionEvent", "profile", "record_function"]


@dataclasses.dataclass
class FunctionEvent:
    """One recorded span: its name, how long it took (microseconds) and on what."""

    name: str
    cpu_time_total: float
    count: int = 1
    is_async: bool = False
    input_shapes: list[list[int]] = dataclasses.field(default_factory=list)
    thread: int = 0
    start_us: float = 0.0

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time(self) -> float:
        """Microseconds per call."""
        return self.cpu_time_total / self.count


def _event(e: tuple, shapes: bool) -> FunctionEvent:
    name, cat, t0, dur, tid, args = e[:6]
    args = args or {}
    if cat == "pg" and name.startswith("pg."):
        name = f"{args.get('backend', 'gloo')}:{name[3:]}"
    shape = [list(args["shape"])] if shapes and "shape" in args else []
    if shapes and args.get("shapes") is not None:  # what the caller passed (coalesced calls)
        shape = [list(s) for s in args["shapes"]]
    if "complex" in str(args.get("dtype", "")):
        shape = [[*s, 2] for s in shape]  # as tensorplay records a complex tensor: its real view
    return FunctionEvent(name, dur / 1e3, 1, cat == "pg", shape, tid, t0 / 1e3)


class profile:
    """Record this process's spans while the block runs (``enabled=False``: nothing).

    tensorplay's other keywords (``use_cuda``, ``profile_memory``, ``with_stack``, ...)
    are accepted; there is no device timeline or memory record here.
    """

    def __init__(self, enabled: bool = True, *, record_shapes: bool = False, **_: Any) -> None:
        self.enabled, self.record_shapes = enabled, record_shapes
        self.function_events: list[FunctionEvent] = []
        self._mark, self._was = 0, False

    def __enter__(self) -> profile:
        if self.enabled:
            self._was = trace.RECORDING
            self._mark = trace.mark()
            trace.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.enabled:
            return
        if not self._was:
            trace.stop()
        events = trace.since(self._mark)
        if not self._was:
            trace.clear()  # nobody else was recording: nothing of this is wanted elsewhere
        self.function_events = [_event(e, self.record_shapes) for e in events]

    def key_averages(self) -> list[FunctionEvent]:
        """One event per name: counts and times summed."""
        by: dict[str, FunctionEvent] = {}
        for e in self.function_events:
            if e.name in by:
                total = by[e.name]
                total.count += 1
                total.cpu_time_total += e.cpu_time_total
            else:
                by[e.name] = dataclasses.replace(e)
        return list(by.values())

    def table(self, sort_by: str | None = None, row_limit: int = 100, **_: Any) -> str:
        """The averages as a text table, longest total first."""
        rows = sorted(self.key_averages(), key=lambda e: -e.cpu_time_total)[:row_limit]
        width = max([len(e.name) for e in rows] + [4])
        lines = [f"{'Name':<{width}}  {'Calls':>6}  {'Total us':>12}  {'Avg us':>12}"]
        lines += [
            f"{e.name:<{width}}  {e.count:>6}  {e.cpu_time_total:>12.1f}  {e.cpu_time:>12.1f}"
            for e in rows
        ]
        return "\n".join(lines)

    def export_chrome_trace(self, path: str) -> None:
        """Write the events as a Chrome trace (``chrome://tracing``, Perfetto)."""
        events = [
            {
                "name": e.name,
                "ph": "X",
                "ts": e.start_us,
                "dur": e.cpu_time_total,
                "pid": 0,
                "tid": e.thread,
                "args": {"Input Dims": e.input_shapes} if e.input_shapes else {},
            }
            for e in self.function_events
        ]
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)


@contextlib.contextmanager
def record_function(name: str, args: str | None = None) -> Iterator[None]:
    """A span of your own inside :class:`profile` (and ``tensorplay_jax.profiler`` traces)."""
    extra = {"args": args} if args is not None else {}
    with trace.span(name, "user", **extra):
        yield
