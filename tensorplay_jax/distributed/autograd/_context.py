"""Distributed autograd contexts: ids, the per-worker registry, ``context()`` and release.

A context id packs the creating worker's rank and a counter
(``runtime.ids.CONTEXT_ID``). Every worker a context reaches (through RPCs,
``remote()``, ``to_here()`` or backward) keeps a :class:`DistAutogradContext`
under the same id, holding the gradients of its
own leaves, the send edges and recv nodes recorded in that context, and the
workers it exchanged messages with. Leaving ``with context()`` drops it here
and asks every known worker to drop it too; each forwards the request to the
workers *it* knows, so nested hops are released as well.

Release requests ride in the metadata of the next call to that worker (no
message of their own in a training loop); what is still queued after
``RELEASE_FLUSH_S`` goes out as one ``_release_remote`` RPC per worker.

The carrier, the one way the package reads or writes the current context id:
:func:`current_id` (this thread's, set by :func:`using`, else the served
RPC's), :func:`carry`/:func:`carried_id` and :func:`release_pending`/
:func:`release_carried` (ids in a call's metadata), :func:`lookup`/
:func:`retrieve` (id to context). Otherwise ids are explicit arguments
(``backward``, ``get_gradients``, our ``internal_target`` RPCs).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import jax

from tensorplay_jax.autograd import GradientEdge, Node, release_graph
from tensorplay_jax.distributed.autograd._gradients import ContextGradients
from tensorplay_jax.rpc import get_worker_info as _rpc_worker_info
from tensorplay_jax.rpc import is_initialized as _rpc_is_initialized
from tensorplay_jax.rpc import rpc_async as _rpc_async
from tensorplay_jax.rpc.internal import (
    current_call_metadata,
    current_caller,
    internal_target,
    not_initialized,
    with_retries,
)
from tensorplay_jax.runtime.ids import CONTEXT_ID
from tensorplay_jax.tensors import Tensor

__all__ = [
    "CONTEXT_ID_SHIFT",
    "META_KEY",
    "RELEASE_FLUSH_S",
    "RELEASE_KEY",
    "DistAutogradContext",
    "carried_id",
    "carry",
    "context",
    "current_id",
    "live_contexts",
    "lookup",
    "new_context_id",
    "release_carried",
    "release_pending",
    "retrieve",
    "using",
]

log = logging.getLogger(__name__)

CONTEXT_ID_SHIFT = CONTEXT_ID.low_bits  # the creating worker's rank sits above this bit
META_KEY = "tpj_autograd_ctx"  # RPC metadata key carrying the context id
RELEASE_KEY = "tpj_autograd_release"  # RPC metadata key carrying context ids to release
RELEASE_FLUSH_S = 0.1  # queued releases not carried by a call by then get an RPC of their own

_contexts: dict[int, DistAutogradContext] = {}
_contexts_lock = threading.Lock()
_counter = itertools.count(1)
_tls = threading.local()


class SendRpcBackward:
    """tensorplay's send function of one message, as its graph introspection sees it.

    Here a message's sent Tensors are kept as their gradient edges (the engine
    starts a backward pass from them); this view gives them tensorplay's shape:
    ``next_functions`` (one ``(node, output_nr)`` per sent Tensor, ``(None, 0)`` for
    one that needs no gradient) and ``name()``.
    """

    __slots__ = ("_edges",)

    def __init__(self, edges: Sequence[GradientEdge | None]) -> None:
        self._edges = tuple(edges)

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        return tuple((None, 0) if e is None else (e.node, e.output_nr) for e in self._edges)

    def name(self) -> str:
        return "torch::distributed::autograd::SendRpcBackward"

    def __repr__(self) -> str:
        return "<SendRpcBackward>"


class DistAutogradContext:
    """One worker's record of one distributed autograd context.

    Holds the gradients of this worker's leaves (never written to
    ``Tensor.grad``), the send edges (where gradients arriving for a message
    go), the recv nodes (tensors that arrived, whose gradients go back), and
    the ids of the workers this context exchanged messages with.

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> ctx = _context.DistAutogradContext(7)
        >>> ctx.context_id, ctx.gradient_arrays(), ctx.known_worker_ids()
        (7, {}, set())
    """

    def __init__(self, context_id: int) -> None:
        self._id = context_id
        self._lock = threading.Lock()
        self.accumulate = ContextGradients()  # this worker's leaves' gradients
        self._sends: dict[int, list[GradientEdge | None]] = {}
        self._recvs: dict[int, Node] = {}
        self._known: set[int] = set()
        self._pass_id: int | None = None
        self._to_release: list[GradientEdge | Tensor] = []

    @property
    def context_id(self) -> int:
        """The context id (same on every worker)."""
        return self._id

    def _context_id(self) -> int:  # tensorplay spelling
        return self._id

    def gradient_arrays(self) -> dict[Tensor, jax.Array]:
        """A new leaf -> gradient map of this worker, as ``jax.Array`` s (for optimizer steps)."""
        return self.accumulate.hand_out()

    def known_worker_ids(self) -> set[int]:
        """Ranks of the workers this context sent to or received from."""
        with self._lock:
            return set(self._known)

    def send_functions(self) -> dict[int, list[GradientEdge | None]]:
        """Message key -> the gradient edges of the Tensors sent in that message."""
        with self._lock:
            return dict(self._sends)

    def recv_functions(self) -> dict[int, Node]:
        """Message key -> the recv node of the Tensors received in that message."""
        with self._lock:
            return dict(self._recvs)

    # tensorplay's private spellings, which its tests and some programs call
    _known_worker_ids = known_worker_ids
    _recv_functions = recv_functions

    def _send_functions(self) -> dict[int, SendRpcBackward]:
        """tensorplay's view of :meth:`send_functions`: a send node per message key."""
        return {key: SendRpcBackward(edges) for key, edges in self.send_functions().items()}

    # ----------------------------------------------------------------- recording
    def add_known(self, worker_id: int) -> None:
        if worker_id not in self._known:
            with self._lock:
                self._known.add(worker_id)

    def add_send(self, key: int, edges: list[GradientEdge | None]) -> None:
        with self._lock:
            self._sends[key] = edges

    def add_recv(self, key: int, node: Node) -> None:
        with self._lock:
            self._recvs[key] = node

    def send_edges(self, key: int) -> list[GradientEdge | None]:
        edges = self._sends.get(key)
        if edges is None:
            raise RuntimeError(
                f"distributed backward: autograd context {self._id} has no record of the RPC "
                f"message {key:#x} on this worker; was that tensor sent inside another context?"
            )
        return edges

    # ----------------------------------------------------------------- backward
    def begin_pass(self, pass_id: int, roots: Sequence[Any], retain_graph: bool) -> None:
        """Note that a backward pass runs from ``roots`` here.

        A pass without ``retain_graph`` frees its graph when it is over. Only the
        worker that called ``backward`` knows when that is; the others free a
        pass's graph when the next pass of this context reaches them, or when
        the context is released.
        """
        old: list[Any] = []
        with self._lock:
            if pass_id != self._pass_id:
                old, self._to_release = self._to_release, []
                self._pass_id = pass_id
            if not retain_graph:
                self._to_release.extend(roots)
        if old:
            release_graph(old)

    def end_pass(self) -> None:
        """Free the graphs of finished passes that did not retain them."""
        with self._lock:
            old, self._to_release = self._to_release, []
        if old:
            release_graph(old)

    def _clear(self) -> None:
        with self._lock:
            self.accumulate.clear()
            self._sends.clear()
            self._recvs.clear()
            self._to_release.clear()

    def __repr__(self) -> str:
        return f"DistAutogradContext(context_id={self._id})"


def _not_found(context_id: Any) -> RuntimeError:
    return RuntimeError(f"Could not find autograd context with id: {context_id}")


# --------------------------------------------------------------------- the carrier
def lookup(context_id: int, *, create: bool = False) -> DistAutogradContext | None:
    """This worker's context ``context_id``, or None; ``create=True`` makes it if absent.

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> _context.lookup(-1) is None, _context.lookup(-1, create=True)
        (True, DistAutogradContext(context_id=-1))
        >>> _context.release(-1, skip=None)
    """
    ctx = _contexts.get(context_id)
    if ctx is None and create:
        with _contexts_lock:
            ctx = _contexts.get(context_id)
            if ctx is None:
                ctx = _contexts[context_id] = DistAutogradContext(context_id)
    return ctx


def live_contexts() -> int:
    """How many contexts are alive on this worker (made here, or reached by a call)."""
    with _contexts_lock:
        return len(_contexts)


def retrieve(context_id: int) -> DistAutogradContext:
    """The context with this id on this worker.

    Raises:
        RuntimeError: "Could not find autograd context with id: N".

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> _context.retrieve(-2)
        Traceback (most recent call last):
        RuntimeError: Could not find autograd context with id: -2
    """
    ctx = lookup(context_id) if isinstance(context_id, int) else None
    if ctx is None:
        raise _not_found(context_id)
    return ctx


def _own_id() -> int | None:
    return getattr(_tls, "context_id", None)


def current_id() -> int | None:
    """This thread's context id: its own (:func:`using`, with an example), else that of the
    RPC it serves; None outside both."""
    cid = _own_id()
    if cid is not None:
        return cid
    return carried_id(current_call_metadata())


class using:  # lowercase: used like a function, ``with using(context_id):``
    """``with using(context_id):`` this thread works in ``context_id``; the previous id is back
    on exit (``using(None)``: in none of its own).

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> with _context.using(3):
        ...     _context.current_id()
        3
    """

    __slots__ = ("_id", "_prev")

    def __init__(self, context_id: int | None) -> None:
        self._id = context_id

    def __enter__(self) -> int | None:
        self._prev = _own_id()
        _tls.context_id = self._id
        return self._id

    def __exit__(self, *exc: object) -> None:
        _tls.context_id = self._prev


def carry(metadata: dict[str, Any], context_id: int) -> None:
    """Put ``context_id`` into an outgoing call's metadata (the callee then works in it).

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> meta = {}
        >>> _context.carry(meta, 9)
        >>> _context.carried_id(meta), _context.carried_id({})
        (9, None)
    """
    metadata[META_KEY] = context_id


def carried_id(metadata: Any) -> int | None:
    """The context id a call's metadata carries, or None (example: :func:`carry`)."""
    return metadata.get(META_KEY)


def new_context_id() -> int:
    """A fresh context id of this worker (rank in the high 16 bits)."""
    rank = _rpc_worker_info().id
    return CONTEXT_ID.pack(rank, next(_counter))


class context:  # the tensorplay spelling (a lowercase class)
    """Open a distributed autograd context; ``with context() as context_id: ...``.

    Every RPC, ``remote()`` and ``to_here()`` made inside the block carries the
    id, so the workers it reaches record under the same id. On exit the
    context is released here and on every worker it reached.

    Raises:
        RpcNotInitializedError: RPC is not initialized.
        RuntimeError: this thread already has a context ("Already have an
            autograd context id for this thread").

    Example:
        >>> import tensorplay_jax.distributed.autograd as dist_autograd
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("ctxdoc", rank=0, world_size=1)
        >>> with dist_autograd.context() as ctx_id:
        ...     ctx_id >> 48
        0
        >>> rpc.shutdown()
    """

    def __enter__(self) -> int:
        if not _rpc_is_initialized():
            raise not_initialized("dist_autograd.context")
        if _own_id() is not None:
            raise RuntimeError(
                "Already have an autograd context id for this thread: leave the current "
                "`with dist_autograd.context()` block before opening another"
            )
        cid = new_context_id()
        lookup(cid, create=True)
        self._id = cid
        self._using = using(cid)
        self._using.__enter__()
        return cid

    def __exit__(self, *exc: object) -> None:
        self._using.__exit__()
        release(self._id, skip=None)


def release(context_id: int, skip: int | None) -> None:
    """Drop the context here and queue its release for every worker it knows (except ``skip``)."""
    with _contexts_lock:
        ctx = _contexts.pop(context_id, None)
    if ctx is None:
        return
    known = ctx.known_worker_ids()
    ctx._clear()
    if not known or not _rpc_is_initialized():
        return
    me = _rpc_worker_info().id
    with _release_cv:
        for wid in known:
            if wid not in (me, skip):
                _release_queue.setdefault(wid, []).append(context_id)
                _release_due.setdefault(wid, time.monotonic() + RELEASE_FLUSH_S)
        _ensure_flusher()


_release_queue: dict[int, list[int]] = {}  # worker -> context ids to release there
_release_due: dict[int, float] = {}  # worker -> when its queue goes out on its own
_release_cv = threading.Lock()
_flusher: threading.Thread | None = None


def release_pending(worker_id: int, metadata: dict[str, Any]) -> None:
    """Move the releases queued for ``worker_id`` into a call's metadata (they ride on it).

    Example:
        >>> from tensorplay_jax.distributed.autograd import _context
        >>> meta = {}
        >>> _context.release_pending(3, meta)  # nothing queued for worker 3
        >>> meta
        {}
    """
    if worker_id not in _release_queue:  # the common case: nothing queued, no lock
        return
    with _release_cv:
        _release_due.pop(worker_id, None)
        ids = _release_queue.pop(worker_id, None)
    if ids:
        metadata[RELEASE_KEY] = ids


def release_carried(metadata: Any, sender: int) -> None:
    """Release the context ids a call's metadata carries (and forward, except to ``sender``)."""
    ids = metadata.get(RELEASE_KEY)
    if ids:
        release_many(ids, skip=sender)


def release_many(context_ids: list[int], skip: int | None) -> None:
    """Release every id in ``context_ids`` (arrived in a call's metadata or a release RPC)."""
    for cid in context_ids:
        release(cid, skip)


def _ensure_flusher() -> None:
    global _flusher
    if _flusher is None or not _flusher.is_alive():
        _flusher = threading.Thread(target=_flush_loop, name="tpj-autograd-release", daemon=True)
        _flusher.start()


def _flush_loop() -> None:
    # Polls instead of being notified: a release costs no thread wake-up.
    while True:
        time.sleep(RELEASE_FLUSH_S)
        now = time.monotonic()
        with _release_cv:
            due = [w for w, t in _release_due.items() if t <= now]
            batches = [(w, _release_queue.pop(w, [])) for w in due]
            for w in due:
                del _release_due[w]
        for wid, ids in batches:
            if not ids or not _rpc_is_initialized():
                continue
            try:
                fut = with_retries(
                    functools.partial(_rpc_async, wid, _release_remote, args=(ids,)),
                    "a release of autograd contexts",
                )
            except Exception as e:  # RPC shut down meanwhile
                log.debug("dist_autograd: could not release contexts on %d: %s", wid, e)
                continue
            fut.add_done_callback(_ignore_failure)


def _ignore_failure(fut: Any) -> None:
    e = fut.exception()
    if e is not None:
        log.debug("dist_autograd: releasing contexts on a peer failed: %s", e)


@internal_target
def _release_remote(context_ids: list[int]) -> None:
    """RPC target: release ``context_ids`` here and forward to the workers this one knows."""
    caller = current_caller()
    release_many(context_ids, skip=None if caller is None else caller.id)


def active_context_ids() -> list[int]:
    """Ids of the contexts alive on this worker (for tests and debugging)."""
    with _contexts_lock:
        return list(_contexts)
