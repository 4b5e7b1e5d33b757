"""``profiler.trace``: recording on every worker, then one merged file.

The worker that traces (the driver, a notebook) does it all over RPC:

1. **Clocks.** For each other worker it sends a few pings (:func:`_clock`)
   and keeps the one with the shortest round trip: the worker's clock read at
   the midpoint of that round trip gives its offset, good to half the round
   trip (kept as ``error_ns`` in the file).
2. **Start.** It turns recording on there (:func:`_remote_start`), then here.
3. **Stop.** It turns recording off here, then on each worker, which waits
   (up to 1 s) for spans still open on its other threads to close (a serve
   whose reply is already out) and hands over its events (:func:`_remote_stop`).
   A worker that died or does not answer within ``timeout`` is listed under
   ``otherData.missing`` in the file, and the others' events are written all
   the same.

Its own control RPCs are not in the trace: each worker is not recording while
it serves them, nor is the driver while it sends them.
Without RPC (a single process) the trace records this process only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tensorplay_jax import rpc
from tensorplay_jax.profiler import _chrome
from tensorplay_jax.profiler._summary import Summary, summarize
from tensorplay_jax.rpc.internal import internal_target
from tensorplay_jax.runtime import trace as recorder

__all__ = ["trace"]

_PINGS = 5  # clock samples per worker; the one with the shortest round trip counts
_active: list[trace] = []  # at most one trace per process at a time


@internal_target
def _clock() -> int:
    """RPC target: this worker's wall clock (ns)."""
    return time.time_ns()


@internal_target
def _remote_start() -> None:
    """RPC target: drop what is left from an earlier trace (not start-up phases); record."""
    recorder.clear()
    recorder.start()


@internal_target
def _remote_stop() -> dict[str, Any]:
    """RPC target: stop recording; hand over the events and thread names."""
    recorder.stop()
    recorder.settle()  # serves whose replies are out but whose spans are not closed yet
    return {
        "events": [list(e) for e in recorder.drain()],
        "threads": [[tid, name] for tid, name in recorder.thread_names().items()],
    }


class trace:  # a context manager named like the function users call
    """Record every worker of the job; write one Chrome-trace / Perfetto JSON file at the end.

    Use it on one worker (the driver, a notebook); while it is open every worker
    records its RPCs (send, serve, reply, with function names and payload bytes),
    ``remote()``, ``to_here()`` and RRef deletes, distributed backward passes,
    ``DistributedOptimizer.step`` on each owner, process-group collectives
    (with the time spent waiting for the others) and ``record_function`` blocks.
    Each span is also a ``jax.profiler.TraceAnnotation``.

    Args:
      path: the JSON file to write (None: keep the document in memory only).
      timeout: seconds each worker has to answer the start, the clock pings and
        the stop; a worker that does not is left out (and named in the file).

    Attributes (after the block):
      document: the merged trace (``{"traceEvents": [...], "otherData": {...}}``).
      missing: worker name -> why its events are not in the file.
      path: where the file was written.

    Example:
      >>> from tensorplay_jax import profiler
      >>> with profiler.trace() as t:
      ...     with profiler.record_function("my step"):
      ...         pass
      >>> [r.calls for r in t.summary().by_name("my step")]
      [1]
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 30.0) -> None:
        self.path = None if path is None else Path(path)
        self.timeout = timeout
        self.document: dict[str, Any] | None = None
        self.missing: dict[str, str] = {}
        self._peers: list[tuple[rpc.WorkerInfo, int, int]] = []  # (worker, offset, error)
        self._me: rpc.WorkerInfo | None = None

    def __enter__(self) -> trace:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Turn recording on for every worker (this one last)."""
        if _active:
            raise RuntimeError("profiler.trace: a trace is already recording in this process")
        _active.append(self)
        try:
            if rpc.is_initialized():
                self._me = rpc.get_worker_info()
                for r in range(rpc.get_debug_info()["world_size"]):
                    if r != self._me.id:
                        self._start_peer(r)
            recorder.clear()
            recorder.start()
        except BaseException:
            _active.remove(self)
            raise

    def _start_peer(self, rank: int) -> None:
        try:
            info = rpc.get_worker_info(_worker_name(rank))
            best: tuple[int, int] | None = None
            for _ in range(_PINGS):
                t0 = time.time_ns()
                theirs = rpc.rpc_sync(info, _clock, timeout=self.timeout)
                rtt = time.time_ns() - t0
                if best is None or rtt < best[1]:
                    best = (theirs - (t0 + rtt // 2), rtt)
            rpc.rpc_sync(info, _remote_start, timeout=self.timeout)
        except Exception as e:
            self.missing[_worker_name(rank)] = f"could not start: {type(e).__name__}: {e}"
            return
        assert best is not None
        self._peers.append((info, best[0], best[1] // 2))

    def stop(self) -> dict[str, Any]:
        """Stop recording everywhere, merge, and write the file; returns the document."""
        recorder.stop()
        recorder.settle()
        try:
            me = self._me
            mine = _chrome.WorkerEvents(
                me.id if me else 0,
                me.name if me else "local",
                recorder.drain(),
                recorder.thread_names(),
            )
            workers = [mine]
            for info, offset, error in self._peers:
                try:
                    got = rpc.rpc_sync(info, _remote_stop, timeout=self.timeout)
                except Exception as e:
                    self.missing[info.name] = f"no events: {type(e).__name__}: {e}"
                    continue
                threads = {int(t): str(n) for t, n in got["threads"]}
                workers.append(
                    _chrome.WorkerEvents(info.id, info.name, got["events"], threads, offset, error)
                )
            self.document = _chrome.merge(sorted(workers, key=lambda w: w.rank), self.missing)
            if self.path is not None:
                _chrome.write(self.document, self.path)
            return self.document
        finally:
            _active.remove(self)

    def summary(self, *, startup: bool = False) -> Summary:
        """Per worker and span name: calls, total, mean and p99 time (ms), and bytes.

        ``startup=True`` keeps the one-off start-up phases (launch, ``init_rpc``) in it.
        """
        if self.document is None:
            raise RuntimeError("profiler.trace.summary: the trace has not stopped yet")
        return summarize(self.document, startup=startup)

    def plot(self, **kwargs: Any) -> Any:
        """Draw the merged trace with matplotlib (see :func:`tensorplay_jax.profiler.plot`)."""
        if self.document is None:
            raise RuntimeError("profiler.trace.plot: the trace has not stopped yet")
        from tensorplay_jax.profiler._plot import plot

        return plot(self.document, **kwargs)

    def __repr__(self) -> str:
        state = (
            "recording" if self.document is None else f"{len(self.document['traceEvents'])} events"
        )
        return f"profiler.trace(path={str(self.path)!r}, {state})"


def _worker_name(rank: int) -> str:
    """The name of the worker of ``rank`` (the agent's peer table resolves ranks too)."""
    return rpc.get_worker_info(rank).name  # type: ignore[arg-type]
