"""The RPC agent: one per process; sends and serves requests, keeps timeouts, stops with the rest.

Message kinds and envelopes: see ``_protocol``.

Transports: peers on this host are reached over ``_local`` (Unix socket +
shared memory) unless TLS is on or ``TENSORPLAY_JAX_RPC_LOCAL=0``; others,
and any peer ``_local`` cannot reach, over the gRPC stream of ``_service``.
The agent holds both kinds of connection as ``_link.Link`` and hands every
transport one ``Inbound`` (its ``_on_message``, ``_on_malformed`` and
``_on_closed``).

Calls run in a thread pool of ``num_worker_threads``; on a ``_local`` link the
reading thread serves the call itself, and reply callbacks run there too (a
watchdog hands reading to a spare thread when such work runs long; at most
``num_worker_threads`` spares per link, then the pool). RRef
bookkeeping (REMOTE's owner record, FORK_ADD/DEL) happens in the reader thread
so it keeps the order in which each peer sent it.
"""

from __future__ import annotations

import concurrent.futures
import gc
import itertools
import logging
import queue
import re
import secrets
import socket
import threading
import time
import traceback
import warnings
from typing import Any

from tensorplay_jax.rpc import _codec, _context, _local, _rref
from tensorplay_jax.rpc._current import current_agent, get_agent, set_current
from tensorplay_jax.rpc._deadlines import Deadlines
from tensorplay_jax.rpc._errors import RpcPeerError, RpcTimeoutError, not_initialized
from tensorplay_jax.rpc._framing import Message
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._link import Inbound, Link
from tensorplay_jax.rpc._protocol import (
    CALL,
    ERR,
    FETCH,
    FORK_ADD,
    FORK_DEL,
    KIND_NAMES,
    OK,
    REMOTE,
)
from tensorplay_jax.rpc._rendezvous import StoreAborted, StoreClient, StoreServer
from tensorplay_jax.rpc._service import Server, TlsConfig, connect
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo
from tensorplay_jax.runtime.init_method import resolve_init
from tensorplay_jax.runtime.secret import job_secret
from tensorplay_jax.runtime.settings import (
    RPC_SERVER_STOP_GRACE_S,
    RPC_SHUTDOWN_EXIT_WAIT_S,
    RPC_STORE_REPLY_GRACE_S,
)

# current_agent, get_agent, set_current and the kinds (CALL, ...) stay importable from
# here: api and the tests use them by these names.
__all__ = [
    "CALL",
    "ERR",
    "FETCH",
    "FORK_ADD",
    "FORK_DEL",
    "OK",
    "REMOTE",
    "Agent",
    "current_agent",
    "get_agent",
    "set_current",
]

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:.]{1,128}$")


def func_name(fn: Any) -> str:
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return repr(fn)
    return f"{mod}.{qual}" if mod else qual


class _Pending:
    __slots__ = ("fut", "info", "link", "timeout", "to")

    def __init__(
        self, fut: Future, to: WorkerInfo, info: _context.CallInfo, timeout: float
    ) -> None:
        self.fut, self.to, self.info, self.timeout = fut, to, info, timeout
        self.link: Link | None = None


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


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"init_rpc: invalid worker name {name!r}; use 1-128 characters from "
            "letters, digits and _ - : ."
        )
    return name


class Agent:
    """Everything one worker needs to call and serve the others."""

    def __init__(
        self, name: str, rank: int, world_size: int | None, options: GrpcRpcBackendOptions
    ) -> None:
        self.options = options
        self.name = validate_name(name)
        host, port, rank, world_size = resolve_init(options.init_method, rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.me = WorkerInfo(name, rank)
        self._store_addr = (host, port)
        self.workers: dict[str, WorkerInfo] = {}
        self.by_id: dict[int, WorkerInfo] = {}
        self._addresses: dict[int, str] = {}
        self._local_addresses: dict[int, str] = {}
        self._links: dict[int, Link] = {}
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._inflight = 0
        self.activity = 0
        self.stopped = False
        # Set once init_rpc has made this agent current: a peer that finished the
        # rendezvous first may call in before this worker's init_rpc returns.
        self._open = threading.Event()
        self._store_server: StoreServer | None = None
        self.store: StoreClient | None = None
        self._server: Server | None = None
        self._local_server: _local.LocalServer | None = None
        self._tls: TlsConfig | None = None
        if options.tls_cert_chain is not None:
            self._tls = TlsConfig(
                options.tls_cert_chain,
                options.tls_private_key,  # type: ignore[arg-type]
                options.tls_root_certs,  # type: ignore[arg-type]
                options.tls_server_name,
                options.tls_require_client_auth,
            )
        # What every link reports to: one bundle for both transports (see _link).
        self._inbound = Inbound(self._on_message, self._on_malformed, self._on_closed)
        self._executor = _Pool(options.num_worker_threads, "tpj-rpc-worker")
        self._deadlines = Deadlines(self._expire, self._pending)
        self.rrefs = _rref.RRefTable(self)

    # ------------------------------------------------------------------ startup

    def start(self) -> None:
        """Rendezvous with the other workers and start serving."""
        try:
            self._start()
        except BaseException as e:
            if self._store_server is not None:
                # Tell the ranks still waiting why, before the store goes (else they
                # would only see it close and blame rank 0).
                why = (
                    f"rank 0 stopped waiting after init_timeout={self.options.init_timeout:g} s"
                    if isinstance(e, TimeoutError)
                    else f"rank 0 failed in init_rpc: {type(e).__name__}: {e}"
                )
                self._store_server.abort(why)
            self.stop(leak_check=False, graceful=False)
            raise
        # Interpreter exit joins thread-pool threads before atexit handlers run, and grpc's
        # stream threads would block in our outboxes forever: stop first (non-graceful).
        threading._register_atexit(self._at_exit)  # type: ignore[attr-defined]

    def open(self) -> None:
        """Start running requests (init_rpc calls this once the agent is current)."""
        self._open.set()

    def _wait_open(self) -> None:
        """Hold a request that arrived before this worker's init_rpc returned."""
        if self._open.wait(self.options.init_timeout) and not self.stopped:
            return
        state = "is shutting down" if self.stopped else "did not finish init_rpc"
        raise RpcPeerError(
            f"worker {self.name!r} {state} within init_timeout={self.options.init_timeout}s; "
            "the request was not run"
        )

    def _at_exit(self) -> None:
        if not self.stopped:
            if current_agent() is self:
                set_current(None)
            self.stop(leak_check=False, graceful=False)

    def _start(self) -> None:
        opts, (host, port) = self.options, self._store_addr
        # The secret comes from the launcher, the user or a local file; never the store.
        secret = job_secret(
            "init_rpc", given=opts.secret, rendezvous_host=host, insecure=opts.insecure
        )
        if self.rank == 0:
            self._store_server = StoreServer(host, port, secret)
        self.store = StoreClient(host, port, self.rank, opts.init_timeout, secret)
        self._secret = secret
        self._server = Server(
            secret=secret,
            inbound=self._inbound,
            max_streams=4 * self.world_size + 16,
            tls=self._tls,
        )
        bound = self._server.start(opts.listen_addr, opts.port)
        adv = opts.advertise_addr
        if adv is None:
            adv = opts.listen_addr
            if adv in ("0.0.0.0", "::", ""):
                adv = socket.gethostname()
        self.address = f"[{adv}]:{bound}" if ":" in adv else f"{adv}:{bound}"
        self._server.expect_target(self.address)
        nonce = secrets.token_hex(8)
        mine = {"name": self.name, "addr": self.address, "nonce": nonce}
        if self._tls is None and _local.available():
            # Same-host peers skip gRPC (see _local); TLS keeps every byte on gRPC.
            self._local_server = _local.LocalServer(
                secret=secret,
                inbound=self._inbound,
                max_threads=self.options.num_worker_threads + 1,
            )
            mine["local"] = [_local.host_id(), self._local_server.address]
        got = self.store.setnx(f"rank/{self.rank}", mine)
        if got["nonce"] != nonce:
            raise ValueError(
                f"init_rpc: rank {self.rank} is already taken by worker {got['name']!r}; "
                "give every process its own rank"
            )
        try:
            table, dead = self.store.wait(
                {f"rank/{r}": r for r in range(self.world_size)}, opts.init_timeout
            )
        except (TimeoutError, StoreAborted) as e:
            raise TimeoutError(
                f"init_rpc: not every worker joined the rendezvous: {e} "
                f"(world_size={self.world_size}; raise init_timeout or start the missing ranks)"
            ) from None
        if dead:
            raise RpcPeerError(f"init_rpc: ranks {dead} exited during the rendezvous")
        names: dict[str, int] = {}
        for r in range(self.world_size):
            ent = table[f"rank/{r}"]
            if ent["name"] in names:
                raise ValueError(
                    f"init_rpc: duplicate worker name {ent['name']!r} (ranks {names[ent['name']]} "
                    f"and {r}); every worker needs a unique name"
                )
            names[ent["name"]] = r
            info = WorkerInfo(ent["name"], r)
            self.workers[info.name] = info
            self.by_id[r] = info
            self._addresses[r] = ent["addr"]
            local = ent.get("local")
            if self._local_server is not None and local and local[0] == _local.host_id():
                self._local_addresses[r] = local[1]

    # ------------------------------------------------------------------ lookups

    def resolve(self, to: Any, what: str) -> WorkerInfo:
        if isinstance(to, WorkerInfo):
            info = self.by_id.get(to.id)
            if info is None or info.name != to.name:
                raise ValueError(f"{what}: unknown destination worker {to!r}; {self._known()}")
            return info
        if isinstance(to, str):
            info = self.workers.get(to)
            if info is None:
                raise ValueError(f"{what}: unknown destination worker name {to!r}; {self._known()}")
            return info
        if isinstance(to, int) and not isinstance(to, bool):
            info = self.by_id.get(to)
            if info is None:
                raise ValueError(f"{what}: unknown destination worker rank {to}; {self._known()}")
            return info
        raise TypeError(f"{what}: to={to!r} must be a worker name, a rank (int) or a WorkerInfo")

    def _known(self) -> str:
        return "known workers: " + ", ".join(f"{w.name} (rank {w.id})" for w in self.by_id.values())

    def _peer_info(self, name: str) -> WorkerInfo:
        return self.workers.get(name) or WorkerInfo(name, -1)

    # ------------------------------------------------------------------ calling

    def _link_for(self, to: WorkerInfo) -> Link:
        link = self._links.get(to.id)
        if link is None or not link.alive:
            link = self._links[to.id] = self._connect(to)
        return link

    def _connect(self, to: WorkerInfo) -> Link:
        """A new link to ``to``: same-host where it can be, else (or failing that) gRPC."""
        ends = {"peer": to.name, "secret": self._secret, "me": self.name, "inbound": self._inbound}
        local = self._local_addresses.get(to.id)
        if local is not None:
            try:
                threads = self.options.num_worker_threads + 1
                return _local.connect_local(local, max_threads=threads, **ends)
            except OSError as e:
                log.debug("rpc: no same-host link to %s (%s); using gRPC", to.name, e)
        return connect(self._addresses[to.id], tls=self._tls, **ends)

    def timeout_of(self, timeout: float) -> float:
        if timeout is None or timeout < 0:
            return self.options.rpc_timeout
        return timeout

    def call(
        self,
        to: WorkerInfo,
        kind: int,
        func: Any = None,
        args: tuple = (),
        kwargs: dict | None = None,
        timeout: float = -1,
        extra: tuple = (),
    ) -> Future:
        """Send one request; the Future gets the reply (or the error)."""
        if self.stopped:
            raise not_initialized(KIND_NAMES.get(kind, "rpc"))
        kwargs = kwargs or {}
        timeout = self.timeout_of(timeout)
        mid = next(self._ids)
        meta = _context.outgoing_metadata()
        info = _context.CallInfo(
            to, KIND_NAMES[kind], func_name(func) if func is not None else "", mid, meta, func
        )
        hooks = _context.active_hooks()
        if kind in (CALL, REMOTE):
            for h in hooks:
                args, kwargs = h.on_send_request(info, args, kwargs)
            # A list, not a tuple, at the top: one msgpack level less per call.
            enc = _codec.encode([func, list(args), kwargs])
        else:
            if kind == FETCH:
                for h in hooks:
                    h.on_send_request(info, (), {})
            enc = _codec.Encoded(b"\xc0", [])
        env = _codec.dumps_small([kind, mid, meta, *extra])
        fut: Future = Future(callback_executor=self._executor)
        pend = _Pending(fut, to, info, timeout)
        with self._lock:
            if self.stopped:
                raise not_initialized(info.kind)
            link = self._link_for(to)
            pend.link = link
            self._pending[mid] = pend
            self.activity += 1
        if timeout > 0:
            self._deadlines.add(time.monotonic() + timeout, mid)
        link.send(env, enc.header, enc.buffers)
        return fut

    def _expire(self, mid: int) -> None:
        with self._lock:
            pend = self._pending.pop(mid, None)
        if pend is not None:
            pend.fut._try_set_exception(
                RpcTimeoutError(
                    f"RPC ran for more than {pend.timeout:g} seconds: {pend.info.kind} to worker "
                    f"{pend.to.name!r} (rank {pend.to.id}) running {pend.info.func_name or '-'} "
                    "timed out (pass a larger timeout= or GrpcRpcBackendOptions(rpc_timeout=...))"
                ),
            )

    def _on_closed(self, link: Link, reason: str) -> None:
        with self._lock:
            for wid, ln in list(self._links.items()):
                if ln is link:
                    del self._links[wid]
            dead = [m for m, p in self._pending.items() if p.link is link]
            pends = [self._pending.pop(m) for m in dead]
        self.rrefs.requester_gone(link)  # fetches it parked here: no one left to answer
        for p in pends:
            if self.stopped:
                msg = f"{p.info.kind} to worker {p.to.name!r} was cancelled: RPC was shut down"
            else:
                msg = (
                    f"{p.info.kind} to worker {p.to.name!r} (rank {p.to.id}) running "
                    f"{p.info.func_name or '-'} failed: lost the connection to {p.to.name!r} at "
                    f"{self._addresses.get(p.to.id)} ({reason}); the worker may have exited or "
                    "been killed"
                )
            p.fut._try_set_exception(RpcPeerError(msg))

    # ------------------------------------------------------------------ receiving

    def _on_message(self, link: Link, msg: Message) -> None:
        try:
            env = _codec.loads_small(msg.envelope)
            kind, mid, meta = env[0], env[1], env[2]
            if not isinstance(kind, int) or not isinstance(mid, int) or not isinstance(meta, dict):
                raise _codec.DecodeError("bad envelope")
        except Exception as e:
            self._on_malformed(link, e)
            return
        if kind in (OK, ERR):
            self._on_reply(kind, mid, meta, msg)
        else:
            self._on_request(link, kind, mid, meta, env[3:], msg)

    def _on_malformed(self, link: Link, err: Exception) -> None:
        log.warning("rpc: malformed message from %s: %s", link.peer, err)
        exc = _codec.DecodeError(f"rpc: worker {self.name!r} got a malformed message: {err}")
        self._send_error(link, 0, exc, "")

    def _on_reply(self, kind: int, mid: int, meta: dict, msg: Message) -> None:
        with self._lock:
            pend = self._pending.pop(mid, None)
            self.activity += 1
        if pend is None:
            return  # timed out or cancelled already
        try:
            value = _codec.decode(msg.header, msg.buffers, peer=pend.to)
            if kind == OK:
                for h in _context.active_hooks():
                    value = h.on_receive_response(pend.info, value, meta)
                pend.fut._try_set_result(value)
            else:
                pend.fut._try_set_exception(_codec.rebuild_exception(value))
        except BaseException as e:
            pend.fut._try_set_exception(e)

    def _on_request(
        self, link: Link, kind: int, mid: int, meta: dict, extra: list, msg: Message
    ) -> None:
        if not self._open.is_set():
            try:
                self._wait_open()
            except RpcPeerError as e:
                self._send_error(link, mid, e, "")
                return
        caller = self._peer_info(link.peer)
        with self._lock:
            self._inflight += 1
            self.activity += 1
        try:
            if kind in (FORK_ADD, FORK_DEL):
                if len(extra) != 2 or type(extra[0]) is not int or type(extra[1]) is not int:
                    raise _codec.DecodeError(
                        f"{KIND_NAMES[kind]}: expected an RRef id and a fork id, got {extra!r:.200}"
                    )
                # An id never created leaves nothing for ever: see _rref.
                if kind == FORK_ADD:
                    self.rrefs.add_fork(extra[0], extra[1], sender=caller)
                else:
                    self.rrefs.del_fork(extra[0], extra[1], sender=caller)
                self._send_ok(link, mid, None, {})
                self._done_serving()
                return
            record = None
            if kind == REMOTE:
                record = self.rrefs.create_owned(extra[0], extra[1])
            elif kind == FETCH:
                record = self.rrefs.lookup_or_pending(extra[0])
            elif kind != CALL:
                raise _codec.DecodeError(f"unknown request kind {kind}")
            # On the same-host transport the reading thread serves the call itself (a
            # thread hand-off costs more than a small call; a slow call gets reading
            # handed on, see _local); else the worker pool serves it.
            inline = link.serves_inline()
            if not inline:
                self._executor.submit(
                    self._serve, link, kind, mid, meta, msg, caller, record, extra
                )
        except BaseException as e:
            self._send_error(link, mid, e, "")
            self._done_serving()
            return
        if inline:
            self._serve(link, kind, mid, meta, msg, caller, record, extra)

    def _done_serving(self) -> None:
        with self._lock:
            self._inflight -= 1

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
        info = _context.CallInfo(caller, KIND_NAMES[kind], "", mid, meta)
        try:
            with _context.serving(meta, caller):
                try:
                    if kind == FETCH:
                        # Parked while the value is not there yet; ends with the value, with
                        # the link, or (if never created) after rpc_timeout: see _rref.
                        value = self.rrefs.fetch(record, link, self.options.rpc_timeout)
                        self._reply_when_done(link, mid, info, value)
                        return
                    fn, args, kwargs = _codec.decode(msg.header, msg.buffers, peer=caller)
                    args = tuple(args)
                    info = info._replace(func_name=func_name(fn), func=fn)
                    for h in _context.active_hooks():
                        args, kwargs = h.on_receive_request(info, args, kwargs)
                    result = fn(*args, **kwargs)
                    if isinstance(result, Future) and getattr(fn, "_tpj_async_execution", False):
                        if kind == REMOTE:
                            result.add_done_callback(record.value._copy_from)
                            result = record.value
                        self._reply_when_done(link, mid, info, result, remote=kind == REMOTE)
                        return
                except BaseException as e:
                    if record is not None and kind == REMOTE:
                        record.value._try_set_exception(e)
                    self._send_error(link, mid, e, info.func_name)
                    return
                if kind == REMOTE:
                    record.value._try_set_result(result)
                    result = None
                self._reply(link, mid, info, result)
        finally:
            self._done_serving()

    def _reply_when_done(
        self, link: Link, mid: int, info: Any, value: Future, remote: bool = False
    ) -> None:
        with self._lock:
            self._inflight += 1

        def done(f: Future) -> None:
            try:
                with _context.serving(info.metadata, info.peer):
                    try:
                        result = f.wait()
                    except BaseException as e:
                        self._send_error(link, mid, e, info.func_name)
                        return
                    self._reply(link, mid, info, None if remote else result)
            finally:
                self._done_serving()

        value.add_done_callback(done)

    def _reply(self, link: Link, mid: int, info: Any, result: Any) -> None:
        resp_meta: dict[str, Any] = {}
        try:
            for h in _context.active_hooks():
                result = h.on_send_response(info, result, resp_meta)
            self._send_ok(link, mid, result, resp_meta)
        except BaseException as e:
            self._send_error(link, mid, e, info.func_name)

    def _send_ok(self, link: Link, mid: int, result: Any, meta: dict) -> None:
        enc = _codec.encode(result)
        link.send(_codec.dumps_small([OK, mid, meta]), enc.header, enc.buffers)

    def _send_error(self, link: Link, mid: int, exc: BaseException, fname: str) -> None:
        tb = "".join(traceback.format_exception(exc)).rstrip()
        where = f" while running {fname}" if fname else ""
        message = (
            f"{exc}\n\nRemote traceback from worker {self.name!r} (rank {self.rank}){where}:\n{tb}"
        )
        body = _codec.encode(_codec.exception_record(exc, message))
        link.send(_codec.dumps_small([ERR, mid, {}]), body.header, body.buffers)

    # ------------------------------------------------------------------ shutdown

    def outstanding(self) -> int:
        return len(self._pending) + self._inflight + self.rrefs.queued_deletes

    def _outstanding_detail(self) -> str:
        return (
            f"{len(self._pending)} call(s) waiting for a reply, {self._inflight} request(s) "
            f"being served, {self.rrefs.queued_deletes} RRef release(s) queued"
        )

    def wait_for_all_workers(self, timeout: float) -> None:
        """Graceful shutdown barrier: return once no worker has work left or in flight.

        Each round, every worker waits until its own calls and served requests
        are done, then publishes how many messages it has handled. Two rounds in
        a row with identical counts on every worker mean nothing moved in
        between. The first time that happens every worker releases the RRefs it
        still uses; the second time, everyone can stop.

        Raises:
          TimeoutError: not done within ``timeout`` seconds (0: no limit); the message
            names the ranks that did not arrive, or this worker's own unfinished work.
          ConnectionError: the store (rank 0) went away.
        """
        deadline = None if not timeout else time.monotonic() + timeout
        assert self.store is not None
        prev: dict[int, Any] | None = None
        released = False
        for k in itertools.count():
            while self.outstanding():
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"shutdown: worker {self.name!r} still has {self.outstanding()} RPCs "
                        f"outstanding after {timeout:g} s ({self._outstanding_detail()}); "
                        "pass a larger timeout= to wait longer"
                    )
                time.sleep(0.002)
            keys = {f"shutdown/{k}/{r}": r for r in range(self.world_size)}
            try:
                if deadline is not None:
                    # A stopped or cut-off rank 0 never answers: give up on it at the deadline.
                    left = max(deadline - time.monotonic(), 0.001)
                    self.store.reply_timeout = left + RPC_STORE_REPLY_GRACE_S
                self.store.set(f"shutdown/{k}/{self.rank}", self.activity)
                left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
                vals, _ = self.store.wait(keys, left)
            except TimeoutError as e:
                raise TimeoutError(
                    f"shutdown: worker {self.name!r} waited timeout={timeout:g} s for every "
                    f"worker to finish its work: {e} (stopped, hung, or cut off from this "
                    "one?); pass a larger timeout= to wait longer"
                ) from None
            except ConnectionError as e:
                if deadline is None or time.monotonic() < deadline:
                    raise  # rank 0 is gone
                raise TimeoutError(
                    f"shutdown: worker {self.name!r} waited timeout={timeout:g} s for every "
                    f"worker to finish its work: ranks [0] did not arrive (its rendezvous "
                    f"store does not answer: {e}; stopped, hung, or cut off from this one?)"
                ) from None
            cur = {r: vals.get(f"shutdown/{k}/{r}") for r in range(self.world_size)}
            if cur == prev:
                if released:
                    return
                # Everyone is in shutdown and quiet: now users let go of their RRefs
                # (every worker decides this in the same round), then settle again.
                released = True
                gc.collect()
                self.rrefs.release_users()
                cur = None
            prev = cur

    def stop(
        self, *, leak_check: bool = True, graceful: bool = True, deadline: float | None = None
    ) -> None:
        """Stop serving and close every connection (local; see wait_for_all_workers).

        Every wait here is bounded, and cut short at ``deadline`` (``time.monotonic()``):
        grpc's grace for open streams (RPC_SERVER_STOP_GRACE_S), rank 0 keeping the store
        up for the others to leave (RPC_SHUTDOWN_EXIT_WAIT_S, graceful only), and each
        store reply (RPC_STORE_REPLY_GRACE_S, also past the deadline: a stopped rank 0
        costs that much once).
        """

        def left(most: float) -> float:
            if deadline is None:
                return most
            return min(most, max(deadline - time.monotonic(), 0.0))

        with self._lock:
            self.stopped = True
            links = list(self._links.values())
        self._open.set()  # release requests held for init_rpc (they get an error)
        if leak_check:
            leaks = self.rrefs.owned_ids()
            if leaks:
                warnings.warn(
                    f"RRef leak check: worker {self.name!r} still owns {len(leaks)} value(s) that "
                    f"other workers referenced at shutdown: "
                    + ", ".join(f"{i:#x}" for i in leaks[:10]),
                    stacklevel=3,
                )
        for link in links:
            link.close()
        if self._local_server is not None:
            self._local_server.stop()
        if self._server is not None:
            self._server.stop(left(RPC_SERVER_STOP_GRACE_S))
        self._deadlines.stop()
        self.rrefs.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.store is not None:
            try:
                self.store.reply_timeout = RPC_STORE_REPLY_GRACE_S
                self.store.add("shutdown/exit", 1)
                if self._store_server is not None and graceful:
                    wait = left(RPC_SHUTDOWN_EXIT_WAIT_S)
                    self.store.reply_timeout = wait + RPC_STORE_REPLY_GRACE_S
                    self.store.wait_count("shutdown/exit", self.world_size, wait)
            except (ConnectionError, OSError):
                pass
            self.store.reply_timeout = RPC_STORE_REPLY_GRACE_S
            self.store.close(clean=graceful)
        if self._store_server is not None:
            self._store_server.close()
