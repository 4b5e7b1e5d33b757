"""The recorder under ``tensorplay_jax.profiler``: one flag, one event buffer, spans.

Every layer records through this module (``rpc/`` may import only
``runtime/``), and ``tensorplay_jax.profiler`` turns it on, collects the
buffers of every worker and writes them out as one Chrome-trace file.

Cheap when off: a hot path tests the module attribute :data:`RECORDING` once
(``if trace.RECORDING:``) and does nothing else; only when it is true does it
take times and build an event. While recording and while a
``jax.profiler.trace`` runs, each :func:`begin` span is also a
``jax.profiler.TraceAnnotation``, so that trace shows the same spans among
XLA's (outside one, an annotation would cost more than the rest of the span).

:func:`drain` hands out one tuple per span, ``(name, cat, t0_ns, dur_ns, tid, args,
flow_in, flow_out, call)``, in this process's wall clock (``time.time_ns``):
``flow_in``/``flow_out`` are the ids of the arrows that end or start at the
span (a request's send to its serve, a reply back), or None; ``call`` is 1 on
the span that sends an RPC (the caller's call, an async span, opens with the
id ``flow_out``), -1 on the span that receives its reply (it closes, with the
id of ``flow_in`` less its reply bit), else 0; ``args`` is a dict or None.
While recording they are kept flat, in one list of strings and numbers, so
that recording allocates nothing the garbage collector has to look at (with
JAX loaded, each collection also runs XLA's own: that, not the recording, was
most of its cost); ``tensorplay_jax.profiler`` expands them into Chrome's events.

Start-up phases (``init_rpc``'s rendezvous, the launcher) happen before anyone
can turn recording on, so :func:`startup` keeps them always, in a short list
of their own, and :func:`drain` hands them over with the first trace.

Example:
    >>> from tensorplay_jax.runtime import trace
    >>> trace.RECORDING
    False
    >>> trace.start()
    >>> with trace.span("step", "user", n=1):
    ...     pass
    >>> trace.stop()
    >>> [(e[0], e[1], e[5]) for e in trace.drain() if e[1] == "user"]
    [('step', 'user', {'n': 1})]
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from itertools import chain
from typing import Any

__all__ = [
    "RECORDING",
    "Span",
    "begin",
    "clear",
    "drain",
    "flow_id",
    "launch_phases",
    "mark",
    "now",
    "settle",
    "since",
    "span",
    "start",
    "startup",
    "stop",
    "thread_names",
]

#: True while this process records. Hot paths test it once per event; only
#: :func:`start` and :func:`stop` change it.
RECORDING = False

# (name, cat, t0_ns, dur_ns, tid, args, flow_in, flow_out, call): see the module docstring
Event = tuple[str, str, int, int, int, Any, int | None, int | None, int]

# Recorded spans, flat: per span its 8 fields (Event's, less args), the number of
# argument items, then the items (key, value, ...). One list.extend per span is atomic
# (no lock on the recording path) and leaves no new object for the garbage collector:
# an event tuple per span made the collector run, and promote in-flight RPC state,
# often enough to cost more than the recording itself.
_events: list[Any] = []
_startup: list[Event] = []  # start-up phases, kept whether recording or not
_STARTUP_MAX = 256
_open: dict[int, int] = {}  # native thread id -> spans open on it (begun, not closed)
_names: dict[int, str] = {}  # native thread id -> thread name, of threads that recorded
_annotation: Any = None  # jax.profiler.TraceAnnotation, imported by start()
_annotating: Any = None  # its is_enabled: whether a jax.profiler trace is running
_lock = threading.Lock()

_now = time.time_ns
_IMPORTED_NS = _now()  # this module's import: early in ``import tensorplay_jax``, after JAX's
_launch_kept = False
_tls = threading.local()  # .tid: this thread's native id (a system call to read afresh)


def _new_thread() -> int:
    tid = _tls.tid = threading.get_native_id()
    _names[tid] = threading.current_thread().name
    return tid


def _tid() -> int:
    try:
        return _tls.tid
    except AttributeError:
        return _new_thread()


def now() -> int:
    """The recorder's clock: this process's wall clock in ns (``time.time_ns``).

    Example:
        >>> now() > 0
        True
    """
    return _now()


def flow_id(rank: int, message_id: int, reply: bool = False) -> int:
    """The job-unique id of the arrow of request ``message_id`` sent by ``rank`` (or its reply).

    Example:
        >>> flow_id(2, 7) != flow_id(2, 7, reply=True) != flow_id(1, 7)
        True
    """
    # 53 bits, so that JSON readers (JavaScript numbers) keep it exact: 12 for the rank,
    # 40 for the message id, 1 for the direction.
    return ((rank & 0xFFF) << 41) | ((message_id & (2**40 - 1)) << 1) | int(reply)


class Span:
    """An open span; :meth:`end` records it (with flows and arguments) and closes its annotation.

    Example:
        >>> start()
        >>> s = begin("encode", "rpc")
        >>> s.end(flow_out=5, bytes=10)
        >>> stop()
        >>> [e[5:] for e in drain() if e[0] == "encode"]
        [({'bytes': 10}, None, 5, 0)]
    """

    __slots__ = ("_ann", "cat", "flow_in", "name", "t0", "tid")

    def __init__(
        self, name: str, cat: str, flow_in: int | None = None, t0: int | None = None
    ) -> None:
        self.name, self.cat, self.flow_in = name, cat, flow_in
        try:
            tid = self.tid = _tls.tid
        except AttributeError:
            tid = self.tid = _new_thread()
        _open[tid] = _open.get(tid, 0) + 1  # only this thread writes its entry: no lock
        # A jax annotation only while a jax.profiler trace runs (is_enabled: one C call).
        self._ann = _annotate(name) if _annotating is not None and _annotating() else None
        self.t0 = _now() if t0 is None else t0

    def end(self, flow_out: int | None = None, call: int = 0, **args: Any) -> None:
        """Record the span from its start until now; ``flow_out`` starts an arrow from it.

        ``call=1`` marks an RPC's send (its async span opens here), ``call=-1`` the
        receipt of its reply (it closes): see the module docstring.
        """
        self.close(flow_out, call, tuple(chain.from_iterable(args.items())) if args else None)

    def close(self, flow_out: int | None, call: int, args: tuple | None) -> None:
        """:meth:`end` for hot paths: ``args`` is a flat ``(key, value, key, value, ...)`` tuple.

        An event holding only strings and numbers is left alone by the garbage
        collector (a dict of arguments per event made recording cost twice as much).
        """
        t1 = _now()
        if self._ann is not None:
            try:  # noqa: SIM105 - not contextlib.suppress: a hot path
                self._ann.__exit__(None, None, None)
            except Exception:  # pragma: no cover - a profiler that cannot annotate
                pass
            self._ann = None
        # Kept even if recording stopped meanwhile: :func:`settle` waits for such spans
        # (a serve whose reply went out before it closed), and the next trace's start
        # clears any that close later still.
        t0 = self.t0
        head = (self.name, self.cat, t0, t1 - t0, self.tid, self.flow_in, flow_out, call)
        _events.extend((*head, len(args), *args) if args else (*head, 0))
        _open[self.tid] -= 1


def _annotate(name: str) -> Any:
    try:
        ann = _annotation(name)
        ann.__enter__()
        return ann
    except Exception:  # pragma: no cover - a profiler that cannot annotate still records
        return None


def begin(name: str, cat: str, flow_in: int | None = None, t0: int | None = None) -> Span:
    """Open a span on this thread (call only while :data:`RECORDING`; end it on this thread).

    ``t0`` (``time.time_ns()``) backdates it: work that may raise before the span can
    be named (encoding) is timed without leaving a jax annotation open if it does.

    Example:
        >>> start(); begin("x", "user").end(); stop(); len(drain()) > 0
        True
    """
    return Span(name, cat, flow_in, t0)


@contextlib.contextmanager
def span(name: str, cat: str, **args: Any) -> Iterator[None]:
    """A span around a block; nothing at all when not recording.

    Example:
        >>> with span("nothing", "user"):
        ...     pass
        >>> [e for e in drain() if e[0] == "nothing"]
        []
    """
    if not RECORDING:
        yield
        return
    s = Span(name, cat)
    try:
        yield
    finally:
        s.end(**args)


def startup(name: str, t0: int, t1: int, **args: Any) -> None:
    """Keep a start-up phase (from ``t0`` to ``t1``, ``time.time_ns``), recording or not.

    Example:
        >>> import time
        >>> t = time.time_ns(); startup("rendezvous", t, t + 1000)
        >>> any(e[0] == "rendezvous" for e in drain())
        True
    """
    if len(_startup) < _STARTUP_MAX:
        flat = tuple(chain.from_iterable(args.items())) if args else None
        _startup.append((name, "startup", t0, t1 - t0, _tid(), flat, None, None, 0))


def launch_phases(until: int) -> None:
    """Keep this worker's start-up under a launcher (``tensorplay_jax.run``, ``rpc.spawn``).

    The launcher passes the time it started the process; two phases are kept
    (once): ``launch: start python, import jax`` (until this package's runtime
    was imported) and ``launch: imports, script until init_rpc`` (until ``until``).
    A process no launcher started keeps nothing.

    Example:
        >>> launch_phases(now())  # started by hand: nothing
        >>> [e for e in drain() if e[0].startswith("launch:")]
        []
    """
    global _launch_kept
    from tensorplay_jax.runtime import settings

    launched = settings.get_int(settings.LAUNCHED_NS_ENV)
    if _launch_kept or launched is None or not launched <= _IMPORTED_NS <= until:
        return
    _launch_kept = True
    os.environ.pop(settings.LAUNCHED_NS_ENV, None)  # not for processes this one starts
    startup("launch: start python, import jax", launched, _IMPORTED_NS)
    startup("launch: imports, script until init_rpc", _IMPORTED_NS, until)


def start() -> None:
    """Turn recording on in this process (idempotent).

    Example:
        >>> from tensorplay_jax.runtime import trace
        >>> start(); trace.RECORDING
        True
        >>> stop(); trace.RECORDING
        False
    """
    global RECORDING, _annotation, _annotating
    if _annotation is None:
        try:
            from jax.profiler import TraceAnnotation

            _annotation = TraceAnnotation
            _annotating = getattr(TraceAnnotation, "is_enabled", lambda: True)
        except Exception:  # pragma: no cover - JAX is a dependency; spans still record
            _annotation = _annotating = None
    RECORDING = True


def stop() -> None:
    """Turn recording off in this process; what was recorded stays for :func:`drain`."""
    global RECORDING
    RECORDING = False


def settle(timeout: float = 1.0) -> bool:
    """Wait (up to ``timeout`` s) for spans other threads opened while recording to close.

    Call it after :func:`stop`, before :func:`drain`: a callee sends its reply before its
    serve span closes, so the caller may stop the trace while that span is still open.
    Spans open on the calling thread do not count. Returns whether all others closed.

    Example:
        >>> stop(); settle()
        True
    """
    me = _tid()
    deadline = time.monotonic() + timeout
    while sum(_open.values()) - _open.get(me, 0) > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def drain() -> list[Event]:
    """Take every event recorded so far (and the start-up phases not taken yet).

    Each event's arguments come back as a dict (recorded as a flat tuple).

    Example:
        >>> isinstance(drain(), list)
        True
    """
    global _events
    with _lock:
        flat, _events = _events, []
        taken = list(_startup)
        _startup.clear()
    taken = [e if e[5] is None else (*e[:5], _args(e[5]), *e[6:]) for e in taken]
    return taken + _decode(flat)


def mark() -> int:
    """Where the buffer ends now: :func:`since` reads the spans recorded after it.

    Example:
        >>> m = mark(); start(); begin("after", "user").end(); stop()
        >>> [e[0] for e in since(m)]
        ['after']
    """
    return len(_events)


def since(at: int) -> list[Event]:
    """The spans recorded after :func:`mark` returned ``at``, left in the buffer (an outer
    trace still gets them); none if the buffer was drained or cleared meanwhile."""
    flat = _events
    return _decode(flat[at:]) if at <= len(flat) else []


def _decode(flat: list[Any]) -> list[Event]:
    taken: list[Event] = []
    i, n = 0, len(flat)
    while i + 9 <= n:
        name, cat, t0, dur, tid, flow_in, flow_out, call, k = flat[i : i + 9]
        args = _args(tuple(flat[i + 9 : i + 9 + k])) if k else None
        taken.append((name, cat, t0, dur, tid, args, flow_in, flow_out, call))
        i += 9 + k
    return taken


def _args(flat: tuple) -> dict[str, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def clear() -> None:
    """Drop the events recorded so far; start-up phases not taken yet stay.

    Example:
        >>> start(); begin("old", "user").end(); stop(); clear()
        >>> [e for e in drain() if e[0] == "old"]
        []
    """
    global _events
    with _lock:
        _events = []


def thread_names() -> dict[int, str]:
    """Native thread id -> name, for every thread that recorded or is alive now.

    Example:
        >>> threading.get_native_id() in thread_names()
        True
    """
    names = dict(_names)
    for t in threading.enumerate():
        if t.native_id is not None:
            names[t.native_id] = t.name
    return names
