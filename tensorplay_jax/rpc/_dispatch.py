"""The agent's receiving side: what it does with each message a link hands it.

A reply (``OK``/``ERR``) completes the pending call it answers. A request is
served: the RRef bookkeeping of ``FORK_ADD``/``FORK_DEL``, ``REMOTE``'s owner
record and ``FETCH``'s lookup happens in the link's reading thread, so it keeps
the order in which each peer sent it; then the call itself runs, hooks around
it, and its reply (or error, with the remote traceback) goes back on the link.

Calls run in :class:`_Pool`, ``num_worker_threads`` daemon threads; on a
``_local`` link the reading thread serves the call itself, and reply
callbacks run there too (a watchdog hands reading to a spare thread when such
work runs long; at most ``num_worker_threads`` spares per link, then the
pool).

:class:`Dispatcher` is that side, one object per agent; it takes what it
works on in its constructor (the in-flight table of ``_inflight``, the RRef
table, the pool) and hands the agent the ``on_message``/``on_malformed``
callbacks of every link's ``Inbound`` (see ``_link``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc import _call_hooks, _codec
from tensorplay_jax.rpc._device_maps import DeviceMaps
from tensorplay_jax.rpc._errors import RpcPeerError, log_call_error
from tensorplay_jax.rpc._framing import Message
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._link import Link
from tensorplay_jax.rpc._protocol import (
    CALL,
    ERR,
    FETCH,
    FORK_ADD,
    FORK_DEL,
    KIND_NAMES,
    OK,
    PING,
    REMOTE,
    TRACE_NAMES,
)
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo
from tensorplay_jax.rpc.functions import async_future
from tensorplay_jax.runtime import pending, trace

if TYPE_CHECKING:
    from tensorplay_jax.rpc._inflight import InFlight
    from tensorplay_jax.rpc._peers import Peers
    from tensorplay_jax.rpc._rref_table import RRefTable

__all__ = ["Dispatcher", "func_name"]

log = logging.getLogger(__name__)


def func_name(fn: Any) -> str:
    """The name hooks and traces give a called function: ``module.qualname``.

    Example:
      >>> import json
      >>> func_name(json.dumps)
      'json.dumps'
    """
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return repr(fn)
    return f"{mod}.{qual}" if mod else qual


class _Pool(concurrent.futures.Executor):
    """The worker threads that serve calls: a ThreadPoolExecutor whose threads are daemons.

    The interpreter joins a ThreadPoolExecutor's threads at exit, so one served call
    that never returns would keep the process alive for ever after shutdown gave up.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self._max, self._name = max_workers, name
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._q.put((fut, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and self._threads < self._max:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self._name}_{self._threads}", daemon=True
                ).start()
        return fut

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.put(None)  # wake the next thread: all of them end
                return
            fut, fn, args, kwargs = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as e:
                    fut.set_exception(e)
            item = fut = fn = args = kwargs = None  # hold nothing while idle
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        self._q.put(None)


@dataclasses.dataclass(eq=False, repr=False, kw_only=True)
class Dispatcher:
    """The agent's receiving side (see the module docstring): one per agent.

    Args:
      name: this worker's name, and ``rank`` its rank (for error messages).
      options: the agent's options (``init_timeout``, ``rpc_timeout``).
      inflight: the agent's calls and served requests (``_inflight``).
      rrefs: the agent's RRef table (the RRef requests are its business).
      executor: the pool that serves what a link's reading thread does not.
      peers: the workers this worker knows (who a caller is; which of them run this
        worker's main script, see ``_objref``).
      device_maps: where a reply's arrays land on the caller (see ``_device_maps``).
    """

    name: str
    rank: int
    options: GrpcRpcBackendOptions
    inflight: InFlight
    rrefs: RRefTable
    executor: concurrent.futures.Executor
    peers: Peers
    device_maps: DeviceMaps

    def __post_init__(self) -> None:
        # Set once init_rpc has made the agent current (a peer that finished the
        # rendezvous first may call in before this worker's init_rpc returns), or stopped.
        self._opened = threading.Event()
        self._closed = False

    def open(self) -> None:
        """Start running requests (held until now: see :meth:`_wait_open`)."""
        self._opened.set()

    def close(self) -> None:
        """Run no more requests; those held for ``open`` get an error."""
        self._closed = True
        self._opened.set()

    def _wait_open(self) -> None:
        """Hold a request that arrived before this worker's init_rpc returned."""
        opts = self.options
        if self._opened.wait(opts.init_timeout) and not self._closed:
            return
        state = "is shutting down" if self._closed else "did not finish init_rpc"
        raise RpcPeerError(
            f"worker {self.name!r} {state} within init_timeout={opts.init_timeout}s; "
            "the request was not run"
        )

    def _peer_info(self, name: str) -> WorkerInfo:
        return self.peers.workers.get(name) or WorkerInfo(name, -1)

    def on_message(self, link: Link, msg: Message) -> None:
        try:
            env = _codec.loads_small(msg.envelope)
            kind, mid, meta = env[0], env[1], env[2]
            if not isinstance(kind, int) or not isinstance(mid, int) or not isinstance(meta, dict):
                raise _codec.DecodeError("bad envelope")
        except Exception as e:
            self.on_malformed(link, e)
            return
        if kind == ERR and mid == 0:
            self._on_protocol_error(link, msg)
        elif kind in (OK, ERR):
            self._on_reply(kind, mid, meta, msg)
        else:
            self._on_request(link, kind, mid, meta, env[3:], msg)

    def on_malformed(self, link: Link, err: Exception) -> None:
        log.warning("rpc: malformed message from %s: %s", link.peer, err)
        exc = _codec.DecodeError(f"rpc: worker {self.name!r} got a malformed message: {err}")
        self._send_error(link, 0, exc, "")

    def _on_protocol_error(self, link: Link, msg: Message) -> None:
        """The peer could not read something sent on ``link`` (its answer to no call: message
        id 0): close the link, naming the error, so its calls fail now, not at their timeout."""
        try:
            err = str(_codec.rebuild_exception(_codec.decode(msg.header, msg.buffers)))
        except Exception as e:
            err = f"(an undecodable error report: {type(e).__name__}: {e})"
        err = err.split("\n\nRemote traceback", 1)[0]
        log.warning("rpc: %s could not read what this worker sent: %s", link.peer, err)
        link.close(f"protocol error: worker {link.peer!r} could not read a message: {err}")

    def _on_reply(self, kind: int, mid: int, meta: dict, msg: Message) -> None:
        flight = self.inflight
        with flight.lock:
            pend = flight.pending.pop(mid, None)
            flight.handled += 1
        if pend is None:
            return  # timed out or cancelled already
        # Recorded calls: a span over decoding the reply and completing the future; the
        # arrow from the callee's reply, and the caller's call, end here.
        span = None
        if pend.traced is not None and trace.RECORDING:
            span = trace.begin(f"reply {pend.traced}", "rpc", trace.flow_id(self.rank, mid, True))
        try:
            value = _codec.decode(msg.header, msg.buffers, peer=pend.to)
            if kind == OK:
                for h in _call_hooks.active_hooks():
                    value = h.on_receive_response(pend.info, value, meta)
                pend.fut._try_set_result(value)
            else:
                pend.fut._try_set_exception(_codec.rebuild_exception(value))
        except BaseException as e:
            pend.fut._try_set_exception(e)
        if span is not None:
            span.close(None, -1, ("from", pend.to.name, "bytes", _nbytes(msg), "ok", kind == OK))

    def _on_request(
        self, link: Link, kind: int, mid: int, meta: dict, extra: list, msg: Message
    ) -> None:
        if not self._opened.is_set():
            try:
                self._wait_open()
            except RpcPeerError as e:
                self._send_error(link, mid, e, "")
                return
        caller = self._peer_info(link.peer)
        flight = self.inflight
        with flight.lock:
            flight.serve_begin(link)
            flight.handled += 1
        try:
            if kind == PING:  # answered here, never queued behind the pool's work
                self._send_ok(link, mid, True, {})
                self._done_serving(link)
                return
            if kind in (FORK_ADD, FORK_DEL):
                if (
                    len(extra) not in (2, 2 + (kind == FORK_ADD))
                    or type(extra[0]) is not int
                    or type(extra[1]) is not int
                    or (len(extra) == 3 and type(extra[2]) is not str)
                ):
                    raise _codec.DecodeError(
                        f"{KIND_NAMES[kind]}: expected an RRef id, a fork id (and, FORK_ADD, "
                        f"its holder's name), got {extra!r:.200}"
                    )
                # An id never created leaves nothing for ever: see _rref_table.
                span = None
                if trace.RECORDING:
                    name = "serve rref_fork" if kind == FORK_ADD else "serve rref_delete"
                    span = trace.begin(name, "rpc", trace.flow_id(caller.id, mid))
                if kind == FORK_ADD:
                    holder = extra[2] if len(extra) == 3 else None
                    self.rrefs.add_fork(extra[0], extra[1], sender=caller, holder=holder)
                else:
                    self.rrefs.del_fork(extra[0], extra[1], sender=caller)
                if span is not None:
                    span.close(None, 0, ("from", caller.name, "kind", KIND_NAMES[kind]))
                self._send_ok(link, mid, None, {})
                self._done_serving(link)
                return
            record = None
            if kind == REMOTE:
                record = self.rrefs.create_owned(extra[0], extra[1], holder=caller.name)
            elif kind == FETCH:
                record = self.rrefs.lookup_or_pending(extra[0])
            elif kind != CALL:
                raise _codec.DecodeError(f"unknown request kind {kind}")
            # On the same-host transport the reading thread serves the call itself (a
            # thread hand-off costs more than a small call; a slow call gets reading
            # handed on, see _local); else the worker pool serves it.
            inline = link.serves_inline()
            if not inline:
                self.executor.submit(self._serve, link, kind, mid, meta, msg, caller, record, extra)
        except BaseException as e:
            self._send_error(link, mid, e, "")
            self._done_serving(link)
            return
        if inline:
            self._serve(link, kind, mid, meta, msg, caller, record, extra)

    def _done_serving(self, link: Link) -> None:
        with self.inflight.lock:
            self.inflight.serve_end(link)

    def _serve(
        self,
        link: Link,
        kind: int,
        mid: int,
        meta: dict,
        msg: Message,
        caller: WorkerInfo,
        record: Any,
        extra: list,
    ) -> None:
        info = _call_hooks.CallInfo(caller, KIND_NAMES[kind], "", mid, meta)
        # While recording, the serve's span (where the arrow from the caller's send ends)
        # starts here and is opened, named after the function, once that is decoded.
        t0, span = trace.now() if trace.RECORDING else 0, None
        try:
            with _call_hooks.serving(meta, caller):
                try:
                    if t0 and kind == FETCH:
                        flow = trace.flow_id(caller.id, mid)
                        span = trace.begin("serve to_here", "rpc", flow, t0=t0)
                    if kind == FETCH:
                        # Parked while the value is not there yet; ends with the value, with
                        # the link, or (if never created) after rpc_timeout: see _rref_table.
                        value = self.rrefs.fetch(record, link, self.options.rpc_timeout)
                        self._reply_when_done(link, mid, info, value)
                        return
                    fn, args, kwargs = _codec.decode(msg.header, msg.buffers, peer=caller)
                    args = tuple(args)
                    info = info._replace(func_name=func_name(fn), func=fn)
                    if t0 and trace.RECORDING:
                        span = self._trace_serve(info, t0)
                    for h in _call_hooks.active_hooks():
                        args, kwargs = h.on_receive_request(info, args, kwargs)
                    result = fn(*args, **kwargs)
                    pending.run_deferred()  # the call's deferred tape work is the call's
                    if getattr(fn, "_tpj_async_execution", False) and async_future(info, result):
                        if kind == REMOTE:
                            result.add_done_callback(record.value._copy_from)
                            result = record.value
                        self._reply_when_done(link, mid, info, result, remote=kind == REMOTE)
                        return
                except BaseException as e:
                    if record is not None and kind == REMOTE:
                        record.value._try_set_exception(e)
                    log_call_error(self._peer_info(self.name), e, info.func)
                    self._send_error(link, mid, e, info.func_name)
                    return
                if kind == REMOTE:
                    record.value._try_set_result(result)
                    result = None
                self._reply(link, mid, info, result)
        finally:
            self._done_serving(link)
            if span is not None:
                span.close(None, 0, ("from", caller.name, "kind", info.kind, "bytes", _nbytes(msg)))

    def _trace_serve(self, info: Any, t0: int) -> trace.Span:
        name = f"serve {TRACE_NAMES[info.kind]} {info.func_name}"
        return trace.begin(name, "rpc", trace.flow_id(info.peer.id, info.message_id), t0=t0)

    def _reply_when_done(
        self, link: Link, mid: int, info: Any, value: Future, remote: bool = False
    ) -> None:
        with self.inflight.lock:
            self.inflight.serve_begin(link)

        def done(f: Future) -> None:
            try:
                with _call_hooks.serving(info.metadata, info.peer):
                    try:
                        result = f.wait()
                    except BaseException as e:
                        self._send_error(link, mid, e, info.func_name)
                        return
                    self._reply(link, mid, info, None if remote else result)
            finally:
                self._done_serving(link)

        value.add_done_callback(done)

    def _reply(self, link: Link, mid: int, info: Any, result: Any) -> None:
        resp_meta: dict[str, Any] = {}
        try:
            for h in _call_hooks.active_hooks():
                result = h.on_send_response(info, result, resp_meta)
            self._send_ok(link, mid, result, resp_meta)
        except BaseException as e:
            self._send_error(link, mid, e, info.func_name)

    def _send_ok(self, link: Link, mid: int, result: Any, meta: dict) -> None:
        t0 = trace.now() if trace.RECORDING else 0
        place = self.device_maps.for_reply(link.peer)
        main = link.peer in self.peers.same_main
        enc = _codec.encode(result, main=main, place=place, to=link.peer)
        span = trace.begin("send reply", "rpc", t0=t0) if t0 and trace.RECORDING else None
        try:
            link.send(_codec.dumps_small([OK, mid, meta]), enc.header, enc.buffers)
        finally:
            if span is not None:
                self._trace_reply_sent(span, link, mid, enc.nbytes, True)

    def _trace_reply_sent(self, span: Any, link: Link, mid: int, nbytes: int, ok: bool) -> None:
        """End a recorded reply's span; the arrow back to the caller starts here."""
        flow = trace.flow_id(self._peer_info(link.peer).id, mid, reply=True)
        span.close(flow, 0, ("to", link.peer, "bytes", nbytes, "ok", ok))

    def _send_error(self, link: Link, mid: int, exc: BaseException, fname: str) -> None:
        tb = "".join(traceback.format_exception(exc)).rstrip()
        where = f" while running {fname}" if fname else ""
        message = (
            f"{exc}\n\nRemote traceback from worker {self.name!r} (rank {self.rank}){where}:\n{tb}"
        )
        t0 = trace.now() if trace.RECORDING else 0
        body = _codec.encode(_codec.exception_record(exc, message))
        span = trace.begin("send error", "rpc", t0=t0) if t0 and trace.RECORDING else None
        try:
            link.send(_codec.dumps_small([ERR, mid, {}]), body.header, body.buffers)
        finally:
            if span is not None:
                self._trace_reply_sent(span, link, mid, body.nbytes, False)


def _nbytes(msg: Message) -> int:
    n = len(msg.header)
    for b in msg.buffers:
        n += b.nbytes if isinstance(b, memoryview) else memoryview(b).nbytes
    return n
