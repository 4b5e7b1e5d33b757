"""See where a distributed step spends its time: one trace across every worker.

``with profiler.trace("step.json"):`` on one worker (the driver, a notebook)
turns recording on for every worker of the job; at the end their events are
merged into one Chrome-trace / Perfetto JSON file (open it in
https://ui.perfetto.dev as it is): a process track per worker, a thread track
per thread, clocks aligned (offsets measured when the trace starts), and flow
arrows from each RPC's send to its serve and from its reply back. Every span is
also a ``jax.profiler.TraceAnnotation``, so a ``jax.profiler.trace`` run shows
them among XLA's. :meth:`trace.summary` is the table (calls, total, mean and
p99 time, bytes per worker and span), like tensorplay's ``key_averages()``;
:func:`plot` (or :meth:`trace.plot`) draws the timeline with matplotlib, in a
notebook or on a host with no browser, and ``python -m tensorplay_jax.profiler
FILE`` prints a saved trace's table (``--plot out.png`` draws it).

For one process, tensorplay's ``profile`` (with ``ProfilerActivity``) records the
same spans inside a block and hands them over as events (``_profile``).

What is recorded: RPC sends, serves and replies (``call``/``remote``/
``to_here``/``rref_delete``, with function names and payload bytes; the
caller's whole call as an async span), distributed backward passes on each
worker (``dist_autograd.backward``, ``dist_autograd: local``, the gradient
RPCs), ``DistributedOptimizer.step`` and each owner's step, process-group
collectives (``pg.all_reduce``, ..., with a nested ``wait ...`` span for the
time spent meeting the other ranks), ``init_rpc``'s start-up phases and
:func:`record_function` blocks. Off (no trace open), each of those places
costs one attribute test. The recorder itself is ``runtime.trace``, so every
layer can record.

Example:
    >>> from tensorplay_jax import profiler
    >>> with profiler.trace() as t:
    ...     with profiler.record_function("load batch"):
    ...         pass
    >>> print(t.summary().table(top=1))  # doctest: +ELLIPSIS
    worker  name        calls  total ms  mean ms  p99 ms  bytes
    local   load batch      1  ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tensorplay_jax.profiler._chrome import WorkerEvents as WorkerEvents
from tensorplay_jax.profiler._chrome import merge as merge
from tensorplay_jax.profiler._plot import plot as plot
from tensorplay_jax.profiler._profile import ProfilerActivity as ProfilerActivity
from tensorplay_jax.profiler._profile import profile as profile
from tensorplay_jax.profiler._session import trace as trace
from tensorplay_jax.profiler._summary import Row as Row
from tensorplay_jax.profiler._summary import Summary as Summary
from tensorplay_jax.profiler._summary import summarize as summarize
from tensorplay_jax.runtime import trace as _recorder

__all__ = [
    "ProfilerActivity",
    "Row",
    "Summary",
    "WorkerEvents",
    "merge",
    "plot",
    "profile",
    "record_function",
    "summarize",
    "trace",
]


@contextlib.contextmanager
def record_function(name: str, **args: Any) -> Iterator[None]:
    """A span of your own (a training step, loading a batch) in the trace; nothing when off.

    Args:
      name: the span's name in the trace and the summary.
      **args: shown with the span (JSON values).

    Example:
      >>> from tensorplay_jax import profiler
      >>> with profiler.record_function("forward", batch=32):
      ...     pass
    """
    with _recorder.span(name, "user", **args):
        yield
