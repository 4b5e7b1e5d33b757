"""Dynamic membership: ``init_rpc(name, rank=r, world_size=None)`` joins a group that changes.

With no ``world_size`` (the argument None and ``WORLD_SIZE`` unset) a worker joins
a *dynamic* group: rank 0 hosts the rendezvous store and must come first; any
other worker joins whenever it starts, leaves with ``rpc.shutdown()`` while the
others go on, and a worker that dies is removed. ``get_worker_info`` and
``get_worker_infos`` answer with who is in the group now.

How it works. A joiner proves the job secret to the store (the same handshake
as a fixed-size group: ``_rendezvous``; nothing is granted without it), then
asks the store to ``join`` (``_group_store``): the store refuses a name or a
rank that a live member holds, or a store that serves a fixed-size group. Every
member watches the store's change log on a second authenticated connection and
applies each change in order. Before ``init_rpc`` returns, the joiner asks every
member to confirm it has applied the join (an RPC), so a worker that has joined
is known to every member. A graceful ``shutdown()`` waits for this worker's own
calls and served requests, releases the RRefs it uses, leaves the store, and
waits (briefly) for every member to apply the leave. A SIGKILLed worker's store
connection closes without leaving: the store logs it as ``"died"`` and every
member removes it at once:

- calls pending to it fail with ``RpcPeerError`` naming it, and so do later
  calls, to its name or through any handle (an RRef, a WorkerInfo) that refers to
  it, even once a replacement has taken its name and rank;
- RRefs it owned fail their users' ``to_here`` and proxies the same way;
- RRefs it held are released on their owners (each owner records who holds each
  fork: ``remote()``'s caller, or the receiver of the call or reply that carried it);
- distributed autograd contexts it took part in fail ``backward`` naming it
  (:func:`on_worker_gone` is how distributed autograd learns of it);
- its name and rank are free for a replacement.

Against torch (``torch/distributed/rpc/__init__.py``, ``backend_registry.py``,
the TensorPipe agent's dynamic mode). The same: ``world_size=None`` selects the
mode, every worker passes a rank, rank 0 hosts the store, names are unique among
live members, a group mixing fixed-size and dynamic workers is refused, joining
is synchronous (every member knows the joiner when ``init_rpc`` returns), and
``shutdown()`` tells every member before it returns. Different, and why:

- torch serialises joins and leaves with a store token and has the joiner and
  leaver update every member over RPC; here the store is the one ordered log
  and members follow it, so a worker that dies (which torch's dynamic mode
  does not handle) is removed the same way as one that leaves;
- torch's dynamic mode has no device maps; neither has ours (``init_rpc``
  refuses ``device_maps``/``devices`` with ``world_size=None``);
- a leaving torch worker only joins its agent; ours first waits for its own
  calls and releases its user RRefs, as a fixed-size graceful shutdown does for
  every worker, because a leaver's RRef forks would otherwise stay on owners;
- rank 0's graceful ``shutdown()`` waits until the others have left (it hosts
  the store; ``timeout=`` bounds the wait). torch leaves that to the user.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc._call_hooks import internal_target
from tensorplay_jax.rpc._current import current_agent
from tensorplay_jax.rpc._errors import MixedGroupError, RpcPeerError
from tensorplay_jax.rpc._peers import Peers
from tensorplay_jax.rpc._protocol import CALL
from tensorplay_jax.rpc._rendezvous import StoreClient
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo

if TYPE_CHECKING:
    from tensorplay_jax.rpc._futures import Future
    from tensorplay_jax.rpc._inflight import InFlight
    from tensorplay_jax.rpc._rref_table import RRefTable
    from tensorplay_jax.rpc._shutdown import ShutdownBarrier

__all__ = [
    "Membership",
    "check_dynamic_options",
    "claim_fixed_size",
    "on_worker_gone",
    "store_client",
]

log = logging.getLogger(__name__)

WATCH_S = 5.0  # one store watch request waits at most this long (then asks again)
JOIN_CONNECT_S = 10.0  # a dynamic joiner waits at most this long for rank 0's store
SYNC_S = 10.0  # a member confirms it applied a change within this long, or is skipped

LEFT = "left the group (it called rpc.shutdown())"
DIED = (
    "died (its connection to the rendezvous store closed without leaving the group: "
    "killed or crashed)"
)

_gone_hooks: list[Callable[[WorkerInfo, str], None]] = []


def on_worker_gone(hook: Callable[[WorkerInfo, str], None]) -> None:
    """Call ``hook(info, message)`` whenever a dynamic group removes a member.

    ``message`` names the worker and says whether it left or died. Hooks run on
    the membership thread, after the agent has failed the calls pending to it.
    """
    _gone_hooks.append(hook)


def store_client(
    host: str,
    port: int,
    secret: str,
    *,
    me: WorkerInfo,
    world_size: int | None,
    init_timeout: float,
) -> StoreClient:
    """Worker ``me``'s connection to the rendezvous store at ``host:port``.

    A worker of a fixed-size group (a ``world_size``) waits for it up to
    ``init_timeout`` (rank 0 may start last). A dynamic group lives in the store
    its rank 0 hosts from ``init_rpc`` to ``shutdown()``, so a joiner waits at
    most ``JOIN_CONNECT_S``.

    Raises:
      TimeoutError: (a joiner) no store answered in time: rank 0 has not started,
        or has shut the group down.
    """
    if world_size is not None or me.id == 0:
        return StoreClient(host, port, me.id, init_timeout, secret)
    wait = min(init_timeout, JOIN_CONNECT_S)
    try:
        return StoreClient(host, port, me.id, wait, secret)
    except TimeoutError:
        raise TimeoutError(
            f"init_rpc: worker {me.name!r} (rank {me.id}) found no dynamic group to "
            f"join at {host}:{port}: no rendezvous store answered within {wait:g} s. A dynamic "
            "group (world_size=None) lives in the store its rank 0 hosts from init_rpc until "
            "its shutdown(): start rank 0 first (with the same MASTER_ADDR/MASTER_PORT); if it "
            "has shut down, that group is gone and a new rank 0 must host a new one"
        ) from None


def check_dynamic_options(options: GrpcRpcBackendOptions) -> None:
    """Refuse what a dynamic group cannot honour in ``options``.

    Raises:
      ValueError: device maps or devices were given.
    """
    if options.device_maps or options.devices is not None:
        raise ValueError(
            "init_rpc: device_maps and devices need a fixed world_size (a dynamic group, "
            "world_size=None, has none, as in tensorplay)"
        )


def claim_fixed_size(store: StoreClient) -> None:
    """Mark the store's group fixed-size (a worker with a ``world_size``).

    Raises:
      MixedGroupError: dynamic members joined it first (a ``RuntimeError`` and a
        ``ValueError``).
    """
    if store.group("mode", mode="static")["v"] != "static":
        raise MixedGroupError(
            "init_rpc: RPC group mixes statically and dynamically initialized members which "
            "is not supported: this group mixes fixed-size (world_size given) and dynamic "
            "(world_size=None) members"
        )


@internal_target
def _applied(version: int) -> bool:
    """RPC target: return once this worker has applied the group's change ``version``."""
    agent = current_agent()
    if agent is None or agent.membership is None:
        return False
    return agent.membership.wait_version(version, SYNC_S)


class Membership:
    """One worker's view of its dynamic group, kept in step with the store's log.

    Args:
      peers: the workers this worker knows: members are added and removed there.
      inflight: the calls in flight (a dead member's pending calls fail).
      rrefs: the RRef table (a gone member's forks are released; a leaver
        releases its user RRefs).
      store: this worker's connection to the rendezvous store.
      barrier: the shutdown barrier (how much of this worker's work is left).
      call: the agent's ``call`` (members confirm that they applied a change).
      where: the store's host, port and the job secret (the watch connection).
    """

    def __init__(
        self,
        *,
        peers: Peers,
        inflight: InFlight,
        rrefs: RRefTable,
        store: StoreClient,
        barrier: ShutdownBarrier,
        call: Callable[..., Future],
        where: tuple[str, int, str],
    ) -> None:
        self._peers, self._flight, self._rrefs = peers, inflight, rrefs
        self._store, self._barrier, self._call = store, barrier, call
        self._where = where
        self.nonces: dict[str, str] = {}  # member name -> the incarnation this worker knows
        self.gone: dict[str, tuple[WorkerInfo, str]] = {}  # removed members and why
        self.version = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._watch: StoreClient | None = None

    # ------------------------------------------------------------------ joining

    def join(self, entry: dict[str, Any], timeout: float) -> Membership:
        """Join the store's group with this worker's rendezvous ``entry``; apply its members.

        Returns:
          This Membership, following the store's log from now on.

        Raises:
          ValueError: a live member has this name or rank, or the store serves a
            fixed-size group.
        """
        me = self._peers.me
        entry = {**entry, "rank": me.id}
        rep = self._store.group("join", entry=entry)
        if "err" in rep:
            raise (MixedGroupError if rep.get("mixed") else ValueError)(
                f"init_rpc: worker {me.name!r} (rank {me.id}) cannot join the dynamic "
                f"group: {rep['err']}"
            )
        for ent in rep["members"]:
            self._add(ent)
        with self._cond:
            self.version = rep["version"]
        host, port, secret = self._where
        self._watch = StoreClient(host, port, me.id, timeout, secret)
        threading.Thread(target=self._follow, name="tpj-rpc-membership", daemon=True).start()
        return self

    def announce(self) -> None:
        """Wait until every member has applied this worker's join (init_rpc, once open)."""
        self._sync_members(self.version)

    def _sync_members(self, version: int) -> None:
        futs = []
        for info in list(self._peers.workers.values()):
            if info.name != self._peers.me.name:
                try:
                    futs.append(self._call(info, CALL, _applied, (version,), {}, SYNC_S))
                except Exception as e:  # gone meanwhile: nothing to confirm
                    log.debug("rpc: %s did not confirm version %d: %s", info.name, version, e)
        for fut in futs:
            try:
                fut.wait()
            except Exception as e:  # a member that died meanwhile
                log.debug("rpc: a member did not confirm version %d: %s", version, e)

    # ------------------------------------------------------------------ following

    def wait_version(self, version: int, timeout: float) -> bool:
        """True once this worker has applied the store's change ``version`` (False: timed out)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self.version < version and not self._stopped:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return self.version >= version

    def _follow(self) -> None:
        """The membership thread: apply the store's changes in order until stopped."""
        watch = self._watch
        assert watch is not None
        while not self._stopped:
            try:
                rep = watch.group("watch", since=self.version, timeout=WATCH_S)
            except (ConnectionError, OSError, ValueError) as e:
                if not self._stopped:
                    log.warning("rpc: the group's store is gone (%s); membership is frozen", e)
                return
            for _, kind, name, ent in rep["changes"]:
                if kind == "join":
                    self._add(ent)
                else:
                    self._remove(name, ent["nonce"], LEFT if kind == "left" else DIED)
            with self._cond:
                self.version = rep["version"]
                self._cond.notify_all()

    def _add(self, ent: dict[str, Any]) -> None:
        peers, name = self._peers, ent["name"]
        old = self.nonces.get(name)
        if old == ent["nonce"]:
            return
        if old is not None:  # the log says the old one went first; be safe all the same
            self._remove(name, old, DIED)
        info = peers.me if name == peers.me.name else WorkerInfo(name, ent["rank"])
        with peers.lock:
            peers.add(info, ent)
            self.nonces[name] = ent["nonce"]

    def _remove(self, name: str, nonce: str, why: str) -> None:
        """Remove member ``name`` (incarnation ``nonce``): fail what waits on it, tell the hooks."""
        peers = self._peers
        with peers.lock:
            if self.nonces.get(name) != nonce or name == peers.me.name:
                return
            del self.nonces[name]
            info, link = peers.remove(name)
            self.gone[name] = (info, why)
            # A worker that left answered what it served before leaving (its replies may
            # still be on the way; its link's closing fails the rest): only a death fails them.
            pends = self._flight.take(lambda p: p.to == info) if why == DIED else []
        for p in pends:
            p.fut._try_set_exception(
                RpcPeerError(
                    f"{p.info.kind} to worker {name!r} (rank {info.id}) running "
                    f"{p.info.func_name or '-'} failed: worker {name!r} {why}"
                )
            )
        if link is not None and why == DIED:
            link.close()
        msg = f"worker {name!r} (rank {info.id}) {why}"
        self._rrefs.holder_gone(name, msg)
        for hook in list(_gone_hooks):
            try:
                hook(info, msg)
            except Exception:  # a hook's bug must not stop the membership thread
                log.exception("rpc: a worker-gone hook failed for %s", name)

    def check_gone(self, what: str, to: Any) -> None:
        """Raise the error for ``to`` (a name, rank or WorkerInfo) if it names a removed member."""
        for info, _ in list(self.gone.values()):
            if to in (info.name, info.id, info):
                raise self.gone_error(what, info) or RpcPeerError(f"{what}: {info!r} is gone")

    def gone_error(self, what: str, to: WorkerInfo) -> RpcPeerError | None:
        """The error for a call to ``to`` if it is no longer in the group, else None."""
        workers = self._peers.workers
        if workers.get(to.name) is to:
            return None
        info, why = self.gone.get(to.name, (to, "is not in the group"))
        later = (
            f"; {to.name!r} now names a worker that joined later, not this one"
            if to.name in workers
            else ""
        )
        return RpcPeerError(f"{what}: worker {to.name!r} (rank {info.id}) {why}{later}")

    # ------------------------------------------------------------------ leaving

    def leave(self, timeout: float) -> None:
        """A graceful leave: finish this worker's work, release its RRefs, leave, tell the group.

        ``timeout``: seconds (0: no limit) for this worker's own work and, on rank 0,
        for the others to leave first.

        Raises:
          TimeoutError: the work (or, on rank 0, the others) did not finish in time.
        """
        me, barrier, store = self._peers.me, self._barrier, self._store
        deadline = None if not timeout or timeout < 0 else time.monotonic() + timeout
        self._until(lambda: not barrier.outstanding(), deadline, "its own calls")
        self._rrefs.release_users()
        self._until(lambda: not barrier.outstanding(), deadline, "its RRef releases")
        if me.id == 0:  # no one may join a group whose store is about to go
            store.group("close", why=f"its rank 0 ({me.name!r}) is shutting it down")
            workers = self._peers.workers
            self._until(lambda: len(workers) <= 1, deadline, "the other members to leave")
        self._sync_members(store.group("leave")["version"])

    def _until(self, done: Callable[[], bool], deadline: float | None, what: str) -> None:
        while not done():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"shutdown: worker {self._peers.me.name!r} waited for {what} past its "
                    f"timeout ({self._barrier.outstanding_detail()}); pass a larger timeout="
                )
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop following the store (the agent's ``stop``)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._watch is not None:
            self._watch.interrupt()
