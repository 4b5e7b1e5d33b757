"""The RPC agent: one per process; starts, sends requests and keeps their timeouts.

Message kinds and envelopes: see ``_protocol``. A dynamic group (``world_size=None``):
``_membership``. Transports (``rpc/transports``): the agent holds an ordered list of them
(``GrpcRpcBackendOptions(transports=...)``, by default ``transports.default_transports()``;
with TLS on, only those that carry it) and reaches each peer through the first that
reaches it, trying the next when a connection fails. It holds every
connection as a ``_link.Link`` and hands every transport one ``Inbound``
(the dispatcher's ``on_message`` and ``on_malformed``, its own ``_on_closed``).

:class:`Agent` ties the parts of a worker's RPC together. Here: start-up
(rendezvous with the store, the transports, the peer table), lookups,
connecting, the calling side (``call``, timeouts, calls failed by a lost
link) and ``stop``. It holds the rest as objects, each given what it works
on: ``_dispatch.Dispatcher`` what arrives (replies, serving requests),
``_shutdown.ShutdownBarrier`` the graceful barrier and leaving the store,
``_rref_table.RRefTable`` the RRef bookkeeping (``agent.rrefs``),
``_inflight.InFlight`` the calls and served requests they share, and
``_peers.Peers`` the workers it knows and its links to them (``agent.peers``),
whose lock is the agent's one lock.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from tensorplay_jax.rpc import _call_hooks, _codec, _objref
from tensorplay_jax.rpc._connections import Connections
from tensorplay_jax.rpc._current import current_agent, get_agent, set_current
from tensorplay_jax.rpc._deadlines import Deadlines
from tensorplay_jax.rpc._device_maps import DeviceMaps
from tensorplay_jax.rpc._dispatch import Dispatcher, _Pool, func_name
from tensorplay_jax.rpc._errors import (
    DestinationTypeError,
    RpcPeerError,
    RpcTimeoutError,
    UnknownWorkerError,
    WorkerNameError,
    check_worker_name,
    not_initialized,
)
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._inflight import InFlight, Pending
from tensorplay_jax.rpc._link import Inbound, Link
from tensorplay_jax.rpc._membership import (
    Membership,
    check_dynamic_options,
    claim_fixed_size,
    store_client,
)
from tensorplay_jax.rpc._peers import Peers
from tensorplay_jax.rpc._protocol import CALL, FETCH, KIND_NAMES, REMOTE, TRACE_NAMES
from tensorplay_jax.rpc._rendezvous import StoreAborted, StoreClient, StoreServer
from tensorplay_jax.rpc._rref_table import RRefTable
from tensorplay_jax.rpc._shutdown import ShutdownBarrier
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo
from tensorplay_jax.rpc.transports import Site, TlsConfig, default_transports
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.address import local_address, store_bind_host
from tensorplay_jax.runtime.init_method import resolve_init
from tensorplay_jax.runtime.secret import job_secret
from tensorplay_jax.runtime.settings import RPC_SERVER_STOP_GRACE_S, RPC_SHUTDOWN_EXIT_WAIT_S

# current_agent, get_agent and set_current stay importable from here (api and the tests).
__all__ = ["Agent", "Outgoing", "current_agent", "get_agent", "set_current"]

log = logging.getLogger(__name__)


class Outgoing(NamedTuple):
    """A request about to be written, as an agent's ``outgoing`` filter sees it."""

    to: WorkerInfo
    kind: int  # a request kind of ``_protocol``
    info: _call_hooks.CallInfo
    extra: tuple  # the envelope's fields after the metadata (an RRef's id, a fork id)
    header: bytes  # the body's encoded header (the function and the arguments but arrays)


class Agent:
    """Everything one worker needs to call and serve the others (see the module docstring).

    ``outgoing``, when given, is called with each request (an :class:`Outgoing`) after
    its timeout has started and before it is written: it may wait (the request is
    written later) or raise (the request is not written, and its Future gets the
    exception). A backend registered with ``backend_registry`` passes one to inject
    faults (``distributed/rpc/_testing``).
    """

    def __init__(
        self,
        name: str,
        rank: int,
        world_size: int | None,
        options: GrpcRpcBackendOptions,
        outgoing: Callable[[Outgoing], None] | None = None,
    ) -> None:
        self.options = options
        self._outgoing = outgoing
        self.name = check_worker_name(name, "init_rpc")
        host, port, self.rank, self.world_size = resolve_init(
            options.init_method, rank, world_size, dynamic=True, timeout=options.init_timeout
        )
        self.membership: Membership | None = None  # a dynamic group's (world_size None)
        self.me = WorkerInfo(name, self.rank)
        self._store_addr = (host, port)
        self.address = ""  # how the peers reach this worker (see Connections.address)
        # The workers known and the links to them; its lock is the agent's one lock.
        self.peers = Peers(self.me)
        self._flight = InFlight(self.peers.lock)
        self.connections = Connections(self.peers)  # the transports, connecting to the peers
        self._ids = itertools.count(1)
        self.stopped = False
        self._store_server: StoreServer | None = None
        self.store: StoreClient | None = None
        self.barrier: ShutdownBarrier | None = None
        self._tls: TlsConfig | None = None
        if options.tls_cert_chain is not None:
            self._tls = TlsConfig(
                options.tls_cert_chain,
                options.tls_private_key,  # type: ignore[arg-type]
                options.tls_root_certs,  # type: ignore[arg-type]
                options.tls_server_name,
                options.tls_require_client_auth,
            )
        self._executor = _Pool(options.num_worker_threads, "tpj-rpc-worker")
        self._deadlines = Deadlines(self._expire, self._flight.pending)
        self.rrefs = RRefTable(self.me, options, self.call)
        # Where arrays land on each peer; checked and completed at start-up.
        self.device_maps = DeviceMaps(name, options.device_maps or {}, options.devices)
        self.dispatch = Dispatcher(
            name=self.name,
            rank=self.rank,
            options=options,
            inflight=self._flight,
            rrefs=self.rrefs,
            executor=self._executor,
            peers=self.peers,
            device_maps=self.device_maps,
        )
        # What every link reports to: one bundle for every transport (see _link).
        self._inbound = Inbound(
            self.dispatch.on_message, self.dispatch.on_malformed, self._on_closed
        )

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
        # Exit joins pool threads before atexit, and grpc's would block: stop first.
        threading._register_atexit(self._at_exit)  # type: ignore[attr-defined]

    def open(self) -> None:
        """Start running requests (init_rpc calls this once the agent is current)."""
        self.dispatch.open()

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
        if self.rank == 0:  # the group's kind is the store's from the start
            mode = "static" if self.world_size is not None else "dynamic"
            self._store_server = StoreServer(store_bind_host(host), port, secret, mode)
        self.store = store_client(
            host,
            port,
            secret,
            me=self.me,
            world_size=self.world_size,
            init_timeout=opts.init_timeout,
        )
        self.barrier = ShutdownBarrier(
            name=self.name,
            rank=self.rank,
            world_size=self.world_size,
            store=self.store,
            store_server=self._store_server,
            inflight=self._flight,
            rrefs=self.rrefs,
            resolve=self.resolve,
            call=self.call,
        )
        self._serve(secret, host, port)
        nonce = secrets.token_hex(8)
        main = self.peers.main = _objref.main_identity()
        mine = {"name": self.name, "addr": self.address, "nonce": nonce, "main": main}
        mine.update(self.connections.advertised(), **self.device_maps.advertised())
        t1 = time.time_ns()  # start-up phases: kept for the profiler (see runtime.trace)
        trace.startup("init_rpc: store and servers", t0, t1, worker=self.name)
        if self.world_size is None:  # a dynamic group
            check_dynamic_options(opts)
            self.membership = Membership(
                peers=self.peers,
                inflight=self._flight,
                rrefs=self.rrefs,
                store=self.store,
                barrier=self.barrier,
                call=self.call,
                where=(host, port, secret),
            ).join(mine, opts.init_timeout)
            return
        claim_fixed_size(self.store)
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
        # Names first: a rank that published its entry and exited may have met this error.
        names: dict[str, int] = {}
        for r in range(self.world_size):
            ent = table.get(f"rank/{r}")
            if ent is not None and ent["name"] in names:
                raise WorkerNameError(
                    f"init_rpc: duplicate worker name {ent['name']!r} (ranks {names[ent['name']]} "
                    f"and {r}): worker name {ent['name']!r} is not unique; every worker needs a "
                    "unique name"
                )
            if ent is not None:
                names[ent["name"]] = r
        if dead:
            raise RpcPeerError(f"init_rpc: ranks {dead} exited during the rendezvous")
        trace.startup("init_rpc: rendezvous", t1, time.time_ns(), world_size=self.world_size)
        with self.peers.lock:
            for r in range(self.world_size):
                ent = table[f"rank/{r}"]
                self.peers.add(WorkerInfo(ent["name"], r), ent)
        self.device_maps.agree(
            {table[f"rank/{r}"]["name"]: table[f"rank/{r}"] for r in names.values()},
            lambda err: self.store.all_gather("devices", err, self.world_size, opts.init_timeout),
        )

    def _serve(self, secret: str, host: str, port: int) -> None:
        """Start the transports of the options' list (those that carry TLS, with TLS on)."""
        opts = self.options
        try:
            # Loopback for a one-host job; across hosts, an address the peers reach.
            chosen = local_address(host, port)
        except ValueError as e:
            raise ValueError(f"init_rpc: {e}") from None
        listen = chosen if opts.listen_addr is None else opts.listen_addr
        adv = opts.advertise_addr
        if adv is None:
            adv = chosen if listen in ("0.0.0.0", "::", "") else listen
        site = Site(
            me=self.name,
            secret=secret,
            inbound=self._inbound,
            max_threads=opts.num_worker_threads + 1,
            listen=listen,
            advertise=adv,
            port=opts.port,
            max_streams=4 * (self.world_size or 16) + 16,
            tls=self._tls,
        )
        names = default_transports() if opts.transports is None else opts.transports
        self.connections.serve(site, names)
        self.address = self.connections.address(adv)

    # ------------------------------------------------------------------ lookups

    def debug_counters(self) -> dict[str, int]:
        """``rpc.get_debug_info``'s counters: pending calls, served calls in flight, owned RRefs."""
        return {
            "num_pending_requests": len(self._flight.pending),
            "num_inflight_served": self._flight.serving,
            "num_owner_rrefs": len(self.rrefs.owned_ids()),
        }

    def resolve(self, to: Any, what: str) -> WorkerInfo:
        peers = self.peers
        if isinstance(to, WorkerInfo):
            info, key = peers.by_id.get(to.id), f"{to!r}"
            info = info if info is not None and info.name == to.name else None
        elif isinstance(to, str):
            info, key = peers.workers.get(to), f"name {to!r}"
        elif isinstance(to, int) and not isinstance(to, bool):
            info, key = peers.by_id.get(to), f"rank {to}"
        else:
            raise DestinationTypeError(
                f"{what}: to={to!r} must be a worker name, a rank (int) or a WorkerInfo"
            )
        if info is None:
            if self.membership is not None:
                self.membership.check_gone(what, to)  # a member that left or died: say so
            raise UnknownWorkerError(
                f"{what}: could not find destination: unknown destination worker {key}; "
                f"{self._known()}"
            )
        return info

    def _known(self) -> str:
        known = self.peers.by_id.values()
        return "known workers: " + ", ".join(f"{w.name} (rank {w.id})" for w in known)

    # ------------------------------------------------------------------ calling

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
        gone = self.membership and self.membership.gone_error(KIND_NAMES.get(kind, "rpc"), to)
        if gone:  # a handle on a member that left or died fails here
            raise gone
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
            enc = _codec.encode(  # a list at the top, not a tuple: one msgpack level less
                [func, list(args), kwargs],
                main=to.name in self.peers.same_main,
                place=self.device_maps.for_request(to.name),
                to=to.name,  # an RRef in it records ``to`` as its fork's holder
            )
        else:
            if kind == FETCH:
                for h in hooks:
                    h.on_send_request(info, (), {})
            enc = _codec.Encoded(b"\xc0", [])
        env = _codec.dumps_small([kind, mid, meta, *extra])
        fut: Future = Future(callback_executor=self._executor)
        pend = Pending(fut, to, info, timeout)
        made = self.connections.premade(to)
        with self.peers.lock:
            if self.stopped:
                if made is not None:
                    made.close()
                raise not_initialized(info.kind)
            link = self.connections.link_for(to, made)
            pend.link = link
            self._flight.pending[mid] = pend
            self._flight.handled += 1
        if timeout > 0:
            self._deadlines.add(time.monotonic() + timeout, mid)
        if self._outgoing is not None:
            try:
                self._outgoing(Outgoing(to, kind, info, extra, bytes(enc.header)))
            except Exception as exc:
                with self.peers.lock:
                    self._flight.pending.pop(mid, None)
                # Without its traceback: the frames of this send (and of what it carries,
                # RRefs passed on) would live as long as the Future does.
                fut._try_set_exception(exc.with_traceback(None))
                return fut
        span = self._trace_send(pend, t0) if t0 and trace.RECORDING else None
        try:
            link.send(env, enc.header, enc.buffers)
        finally:
            if span is not None:  # the arrow to the serve, and the caller's call, start here
                span.close(trace.flow_id(self.rank, mid), 1, ("to", to.name, "bytes", enc.nbytes))
        return fut

    def _trace_send(self, pend: Pending, t0: int) -> trace.Span:
        """The span of a recorded request's send (encoding it, handing it to the link)."""
        name = f"{TRACE_NAMES[pend.info.kind]} {pend.info.func_name}".rstrip()
        pend.traced = name  # before the reply can arrive: its span is named after it
        return trace.begin(f"send {name}", "rpc", t0=t0)

    def _expire(self, mid: int) -> None:
        with self.peers.lock:
            pend = self._flight.pending.pop(mid, None)
        if pend is not None:
            pend.fut._try_set_exception(
                RpcTimeoutError(
                    f"RPC ran for more than {pend.timeout:g} seconds: {pend.info.kind} to worker "
                    f"{pend.to.name!r} (rank {pend.to.id}) running {pend.info.func_name or '-'} "
                    "timed out (pass a larger timeout= or GrpcRpcBackendOptions(rpc_timeout=...))"
                ),
            )

    def _on_closed(self, link: Link, reason: str) -> None:
        with self.peers.lock:
            self.connections.forget(link)
            self._flight.link_closed(link)  # what it asked for is no one's to wait for now
            pends = self._flight.take(lambda p: p.link is link)
        self.rrefs.requester_gone(link)  # fetches it parked here: no one left to answer
        for p in pends:
            if self.stopped:
                msg = f"{p.info.kind} to worker {p.to.name!r} was cancelled: RPC was shut down"
            else:
                msg = (
                    f"{p.info.kind} to worker {p.to.name!r} (rank {p.to.id}) running "
                    f"{p.info.func_name or '-'} failed: lost the connection to {p.to.name!r} at "
                    f"{self.peers.address(p.to.id)} ({reason}); the worker may have exited or "
                    "been killed"
                )
            p.fut._try_set_exception(RpcPeerError(msg))

    # ------------------------------------------------------------------ stopping

    def stop(
        self, *, leak_check: bool = True, graceful: bool = True, deadline: float | None = None
    ) -> None:
        """Stop serving and close every connection (local; see ``ShutdownBarrier``).

        Every wait is bounded, and cut short at ``deadline`` (``time.monotonic()``): the
        transports' grace (RPC_SERVER_STOP_GRACE_S), rank 0 keeping the store up for the
        others (RPC_SHUTDOWN_EXIT_WAIT_S, graceful only), each store reply
        (RPC_STORE_REPLY_GRACE_S, also past the deadline: a stopped rank 0 costs it once).
        """

        def left(most: float) -> float:
            if deadline is None:
                return most
            return min(most, max(deadline - time.monotonic(), 0.0))

        with self.peers.lock:
            self.stopped = True
        self.dispatch.close()  # release requests held for init_rpc (they get an error)
        if self.membership is not None:
            self.membership.stop()
        if leak_check:
            leaks = self.rrefs.owned_ids()
            if leaks:
                warnings.warn(
                    f"RRef leak check: worker {self.name!r} still owns {len(leaks)} value(s) that "
                    f"other workers referenced at shutdown: "
                    + ", ".join(f"{i:#x}" for i in leaks[:10]),
                    stacklevel=3,
                )
        self.connections.close(left(RPC_SERVER_STOP_GRACE_S))
        self._deadlines.stop()
        self.rrefs.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.barrier is not None:
            self.barrier.leave(graceful=graceful, wait=left(RPC_SHUTDOWN_EXIT_WAIT_S))
        if self._store_server is not None:
            self._store_server.close()
