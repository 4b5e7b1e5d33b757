"""The RPC agent: one per process; starts, sends requests and keeps their timeouts.

Message kinds and envelopes: see ``_protocol``.

Transports: peers on this host are reached over ``_local`` (Unix socket +
shared memory) unless TLS is on or ``TENSORPLAY_JAX_RPC_LOCAL=0``; others over
the plain TCP link of ``_tcp`` unless TLS is on or ``TENSORPLAY_JAX_RPC_TCP=0``;
the rest, and any peer those cannot reach, over the gRPC stream of ``_service``.
The agent holds both kinds of connection as ``_link.Link`` and hands every
transport one ``Inbound`` (its ``_on_message``, ``_on_malformed`` and
``_on_closed``).

:class:`Agent` ties the parts of a worker's RPC together. Here: start-up
(rendezvous with the store, the peer table), lookups, connecting, and the
calling side (``call``, timeouts, calls failed by a lost link). Its base
classes hold the rest: ``_serve.Serving`` what arrives (replies, serving
requests, the worker pool), ``_shutdown.Shutdown`` the graceful barrier and
``stop``. The RRef bookkeeping is ``_rref_table.RRefTable`` (``agent.rrefs``).
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
import threading
import time
from typing import Any

from tensorplay_jax.rpc import _call_hooks, _codec, _local, _objref, _tcp
from tensorplay_jax.rpc._current import current_agent, get_agent, set_current
from tensorplay_jax.rpc._deadlines import Deadlines
from tensorplay_jax.rpc._dispatch import Serving, _Pool, func_name
from tensorplay_jax.rpc._errors import RpcPeerError, RpcTimeoutError, not_initialized
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._grpc import Server, TlsConfig, connect
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
    TRACE_NAMES,
)
from tensorplay_jax.rpc._rendezvous import StoreAborted, StoreClient, StoreServer
from tensorplay_jax.rpc._rref_table import RRefTable
from tensorplay_jax.rpc._shutdown import Shutdown
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.address import local_address, store_bind_host
from tensorplay_jax.runtime.init_method import resolve_init
from tensorplay_jax.runtime.secret import job_secret

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


class _Pending:
    __slots__ = ("fut", "info", "link", "timeout", "to", "traced")

    def __init__(
        self, fut: Future, to: WorkerInfo, info: _call_hooks.CallInfo, timeout: float
    ) -> None:
        self.fut, self.to, self.info, self.timeout = fut, to, info, timeout
        self.link: Link | None = None
        self.traced: str | None = None  # its name in a trace, when the profiler records it


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"init_rpc: invalid worker name {name!r}; use 1-128 characters from "
            "letters, digits and _ - : ."
        )
    return name


class Agent(Serving, Shutdown):
    """Everything one worker needs to call and serve the others (see the module docstring)."""

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
        # Workers that run this worker's main script: its functions go to them by name.
        self.same_main: set[str] = set()
        self._tcp_ports: dict[int, int] = {}
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
        self._tcp_server: _tcp.TcpServer | None = None
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
        self.rrefs = RRefTable(self)

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

    def _at_exit(self) -> None:
        if not self.stopped:
            if current_agent() is self:
                set_current(None)
            self.stop(leak_check=False, graceful=False)

    def _start(self) -> None:
        t0 = time.time_ns()
        trace.launch_phases(t0)  # kept for the profiler, as init_rpc's phases below are
        opts, (host, port) = self.options, self._store_addr
        # The secret comes from the launcher, the user or a local file; never the store.
        secret = job_secret(
            "init_rpc", given=opts.secret, rendezvous_host=host, insecure=opts.insecure
        )
        if self.rank == 0:
            self._store_server = StoreServer(store_bind_host(host), port, secret)
        self.store = StoreClient(host, port, self.rank, opts.init_timeout, secret)
        self._secret = secret
        self._server = Server(
            secret=secret,
            inbound=self._inbound,
            max_streams=4 * self.world_size + 16,
            tls=self._tls,
        )
        try:
            # Loopback for a one-host job; across hosts, an address the peers reach.
            chosen = local_address(host, port)
        except ValueError as e:
            raise ValueError(f"init_rpc: {e}") from None
        listen = chosen if opts.listen_addr is None else opts.listen_addr
        bound = self._server.start(listen, opts.port)
        adv = opts.advertise_addr
        if adv is None:
            adv = chosen if listen in ("0.0.0.0", "::", "") else listen
        self.address = f"[{adv}]:{bound}" if ":" in adv else f"{adv}:{bound}"
        self._server.expect_target(self.address)
        nonce = secrets.token_hex(8)
        main = _objref.main_identity()
        mine = {"name": self.name, "addr": self.address, "nonce": nonce, "main": main}
        if self._tls is None and _local.available():
            # Same-host peers skip gRPC (see _local); TLS keeps every byte on gRPC.
            self._local_server = _local.LocalServer(
                secret=secret,
                inbound=self._inbound,
                max_threads=self.options.num_worker_threads + 1,
            )
            mine["local"] = [_local.host_id(), self._local_server.address]
        if self._tls is None and _tcp.enabled():
            # Between hosts, a plain TCP link beside gRPC (see _tcp); TLS keeps gRPC.
            self._tcp_server = _tcp.TcpServer(
                secret=secret,
                host=listen,  # the gRPC server's address
                inbound=self._inbound,
                max_threads=self.options.num_worker_threads + 1,
            )
            mine["tcp"] = self._tcp_server.port
        t1 = time.time_ns()  # start-up phases: kept for the profiler (see runtime.trace)
        trace.startup("init_rpc: store and servers", t0, t1, worker=self.name)
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
        trace.startup("init_rpc: rendezvous", t1, time.time_ns(), world_size=self.world_size)
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
            if r == self.rank or (main is not None and ent.get("main") == main):
                self.same_main.add(info.name)
            local = ent.get("local")
            if self._local_server is not None and local and local[0] == _local.host_id():
                self._local_addresses[r] = local[1]
            tcp = ent.get("tcp")
            if self._tcp_server is not None and isinstance(tcp, int) and 0 < tcp < 65536:
                self._tcp_ports[r] = tcp

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

    # ------------------------------------------------------------------ calling

    def _link_for(self, to: WorkerInfo, made: Link | None = None) -> Link:
        """The live link to ``to`` (the caller holds the lock): the one kept, else ``made``
        (connected before the lock was taken), else a new one."""
        link = self._links.get(to.id)
        if link is not None and link.alive:
            if made is not None:
                made.close()  # another thread connected first
            return link
        link = self._links[to.id] = made if made is not None else self._connect(to)
        return link

    def _premade(self, to: WorkerInfo) -> Link | None:
        """A TCP link to ``to`` if it needs one: made outside the lock, for a connection to
        another host takes a round trip or more (a timeout, if the host is gone)."""
        link = self._links.get(to.id)
        if (link is not None and link.alive) or to.id not in self._tcp_ports:
            return None
        if to.id in self._local_addresses:
            return None
        return self._connect(to)

    def _connect(self, to: WorkerInfo) -> Link:
        """A new link to ``to``: same-host where it can be, else (or failing that) gRPC."""
        ends = {"peer": to.name, "secret": self._secret, "me": self.name, "inbound": self._inbound}
        local = self._local_addresses.get(to.id)
        threads = self.options.num_worker_threads + 1
        if local is not None:
            try:
                return _local.connect_local(local, max_threads=threads, **ends)
            except OSError as e:
                log.debug("rpc: no same-host link to %s (%s); using gRPC", to.name, e)
        port = self._tcp_ports.get(to.id)
        if port is not None:
            host = _tcp.host_of(self._addresses[to.id])
            try:
                return _tcp.connect_tcp(host, port, max_threads=threads, **ends)
            except OSError as e:
                log.warning(
                    "rpc: no TCP link to %s at %s:%s (%s); using its gRPC stream",
                    to.name, host, port, e,
                )  # fmt: skip
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
        meta = _call_hooks.outgoing_metadata()
        info = _call_hooks.CallInfo(
            to, KIND_NAMES[kind], func_name(func) if func is not None else "", mid, meta, func
        )
        t0 = time.time_ns() if trace.RECORDING else 0  # the send's span starts here
        hooks = _call_hooks.active_hooks()
        if kind in (CALL, REMOTE):
            for h in hooks:
                args, kwargs = h.on_send_request(info, args, kwargs)
            # A list, not a tuple, at the top: one msgpack level less per call.
            enc = _codec.encode([func, list(args), kwargs], main=to.name in self.same_main)
        else:
            if kind == FETCH:
                for h in hooks:
                    h.on_send_request(info, (), {})
            enc = _codec.Encoded(b"\xc0", [])
        env = _codec.dumps_small([kind, mid, meta, *extra])
        fut: Future = Future(callback_executor=self._executor)
        pend = _Pending(fut, to, info, timeout)
        made = self._premade(to)
        with self._lock:
            if self.stopped:
                if made is not None:
                    made.close()
                raise not_initialized(info.kind)
            link = self._link_for(to, made)
            pend.link = link
            self._pending[mid] = pend
            self.activity += 1
        if timeout > 0:
            self._deadlines.add(time.monotonic() + timeout, mid)
        span = self._trace_send(pend, t0) if t0 and trace.RECORDING else None
        try:
            link.send(env, enc.header, enc.buffers)
        finally:
            if span is not None:  # the arrow to the serve, and the caller's call, start here
                span.close(trace.flow_id(self.rank, mid), 1, ("to", to.name, "bytes", enc.nbytes))
        return fut

    def _trace_send(self, pend: _Pending, t0: int) -> trace.Span:
        """The span of a recorded request's send (encoding it, handing it to the link)."""
        name = f"{TRACE_NAMES[pend.info.kind]} {pend.info.func_name}".rstrip()
        pend.traced = name  # before the reply can arrive: its span is named after it
        return trace.begin(f"send {name}", "rpc", t0=t0)

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
