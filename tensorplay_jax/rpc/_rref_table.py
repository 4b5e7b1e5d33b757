"""The RRef bookkeeping of one worker: distributed reference counting of values it owns.

:class:`RRefTable` (``agent.rrefs``) keeps the owner side (records of the values
other workers reference, their forks, placeholders, parked fetches and
deletes) and the user side (the RRefs this worker holds of others' values, and
the thread that sends their FORK_DEL). The user-facing ``RRef`` is ``_rref``'s.

Counting protocol. The owner keeps a record per value that other workers may
reference, holding a set of *fork ids*. Every time an RRef is serialised (as
an argument, a result, inside a container, to any worker) the sender makes a
new fork id and registers it with the owner first (FORK_ADD; applied at once
when the sender is the owner). The receiver either is the owner, which takes
a local handle and drops that fork at once, or becomes a user holding that
fork, and sends FORK_DEL when its RRef is garbage collected (or at graceful
shutdown). A worker's FORK_ADD for a copy always precedes its own FORK_DEL on
the same ordered stream, so the set cannot empty while a copy is in flight; a
FORK_DEL that overtakes its FORK_ADD (they come from different workers) is
parked until the FORK_ADD arrives; one that overtakes the ``remote()`` creating
the value cancels the creation's fork, and the owner keeps no record. When the
set empties the owner drops its record, and the value is freed once no local
handle holds it. Records still alive at shutdown are reported by the leak check.

Ids not created yet. A FORK_ADD, a fetch (``to_here``) or an RRef passed to
its owner can reach the owner before the ``remote()`` that creates the value
(they come from other workers): the owner then makes a *placeholder* record
that the creation fills. A placeholder lives at most the owner's
``rpc_timeout`` unless a ``remote()`` for its id arrives: then it is dropped,
with a warning naming the id and who named it, and everything waiting on its
value (``local_value()`` on such an RRef, a parked fetch) fails with an
``RpcTimeoutError`` that says so. A FORK_DEL parked for a FORK_ADD that never
comes is dropped after ``rpc_timeout`` too. So a peer naming ids that were
never created (a faulty one, or one of another RPC session) leaves nothing
behind for ever, and never blocks a call for ever.

A parked fetch ends when the value is set, when the requester's connection
closes (nobody is left to answer; a placeholder nothing else needs goes with
it), or when its placeholder is dropped; so a fetch for an id never created
cannot hold the shutdown barrier.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc import _codec
from tensorplay_jax.rpc._deadlines import Deadlines
from tensorplay_jax.rpc._errors import RpcPeerError, RpcTimeoutError
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._protocol import FORK_DEL
from tensorplay_jax.rpc._retries import with_retries
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo
from tensorplay_jax.runtime.ids import RREF_ID
from tensorplay_jax.runtime.settings import DEFAULT_RPC_TIMEOUT_S

if TYPE_CHECKING:
    from tensorplay_jax.rpc._rref import RRef

__all__ = ["RRefTable"]

log = logging.getLogger(__name__)


class _OwnerRecord:
    __slots__ = ("__weakref__", "created", "expiry", "fetches", "forks", "id", "origin", "value")

    def __init__(self, rref_id: int, value: Future, created: bool = False) -> None:
        self.id = rref_id
        self.value = value
        self.forks: set[int] = set()
        self.created = created  # the value is there, or its remote() has arrived (being made)
        self.fetches = 0  # parked fetches waiting for the value
        self.expiry = 0  # a placeholder's deadline key (0: none)
        self.origin: tuple[str, Any, float] | None = None  # a placeholder's (what, sender, timeout)


class _ParkedFetch:
    __slots__ = ("answer", "link", "record", "timeout")

    def __init__(self, record: _OwnerRecord, link: Any, timeout: float) -> None:
        self.record, self.link, self.timeout = record, link, timeout
        self.answer: Future = Future()


def _requester_gone(rref_id: int, link: Any) -> RpcPeerError:
    return RpcPeerError(
        f"fetch: RRef {rref_id:#x}: the requester {link.peer!r} disconnected while it waited"
    )


class RRefTable:
    """A worker's RRef bookkeeping: owned records, parked deletes, live users, the deleter.

    Args:
      me: this worker (its rank is in every RRef id it makes).
      options: the agent's options: ``rpc_timeout`` (read at each use: it may change)
        bounds placeholders and parked releases.
      call: the agent's ``call``, which sends the FORK_DELs.
    """

    def __init__(
        self, me: WorkerInfo, options: GrpcRpcBackendOptions, call: Callable[..., Future]
    ) -> None:
        self._me, self._options, self._call = me, options, call
        self._owners: dict[int, _OwnerRecord] = {}
        # FORK_DELs that came before their FORK_ADD: (rref id, fork) -> deadline key (0: none).
        self._parked: dict[tuple[int, int], int] = {}
        # Who holds each fork, where known (remote()'s caller, an RRef's receiver): a dynamic
        # group releases the forks of a worker that leaves or dies.
        self._holders: dict[tuple[int, int], str] = {}
        self._users: weakref.WeakSet[RRef] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._ids = itertools.count(0)  # tensorplay's serials start at 0 (ids in reprs)
        self._deletes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = False
        self.queued_deletes = 0  # counted as outstanding work by the shutdown barrier
        self._fetches: dict[int, _ParkedFetch] = {}  # fetches waiting for a value, by key
        # Placeholder records and parked FORK_DELs with a deadline, by key.
        self._expiring: dict[int, _OwnerRecord | tuple[int, int, Any, float]] = {}
        self._keys = itertools.count(1)  # deadline keys of both
        self._deadlines = Deadlines(
            self._expired, collections.ChainMap(self._fetches, self._expiring)
        )
        threading.Thread(target=self._deleter, name="tpj-rpc-rref-deleter", daemon=True).start()

    def new_id(self) -> int:
        return RREF_ID.pack(self._me.id, next(self._ids))

    # owner side
    def add_fork(
        self,
        rref_id: int,
        fork: int,
        record: _OwnerRecord | None = None,
        sender: Any = None,
        holder: str | None = None,
    ) -> None:
        """Register ``fork`` of ``rref_id`` (a FORK_ADD from ``sender``, or this worker
        sending its own ``record``), held by the worker named ``holder`` if known."""
        with self._lock:
            if self._add_fork(rref_id, fork, record, sender) is not None and holder is not None:
                self._holders[(rref_id, fork)] = holder

    def _add_fork(
        self, rref_id: int, fork: int, record: _OwnerRecord | None, sender: Any
    ) -> _OwnerRecord | None:
        # The caller holds the lock.
        key = self._parked.pop((rref_id, fork), None)
        if key is not None:  # its FORK_DEL came first: they cancel out
            self._expiring.pop(key, None)
            return None
        rec = self._owners.get(rref_id) or record
        if rec is None:
            # The fork can arrive (from a third worker) before the remote() call that
            # creates the value: hold a placeholder that the creation will fill.
            rec = self._placeholder(rref_id, "a FORK_ADD", sender)
        rec.forks.add(fork)
        self._owners[rref_id] = rec
        return rec

    def del_fork(self, rref_id: int, fork: int, sender: Any = None) -> None:
        """Drop ``fork`` of ``rref_id`` (a FORK_DEL from ``sender``, or an RRef that reached
        its owner); parked if its FORK_ADD has not come yet."""
        with self._lock:
            rec = self._owners.get(rref_id)
            if rec is None or fork not in rec.forks:
                self._park_delete(rref_id, fork, sender)
                return
            rec.forks.discard(fork)
            self._holders.pop((rref_id, fork), None)
            # A placeholder stays for the remote() that fills it (a local handle may wait
            # on it), or until its deadline.
            if not rec.forks and rec.created:
                del self._owners[rref_id]

    def create_owned(self, rref_id: int, fork: int, holder: str | None = None) -> _OwnerRecord:
        """A value ``remote()`` creates here; ``holder`` (its caller) holds ``fork``."""
        with self._lock:
            rec = self._owners.get(rref_id)
            if rec is None:
                rec = self._owners[rref_id] = _OwnerRecord(rref_id, Future())
            rec.created = True
            if rec.expiry:  # a placeholder: filled now, in time
                self._expiring.pop(rec.expiry, None)
                rec.expiry = 0
            cancelled = self._add_fork(rref_id, fork, rec, None) is None
            # The creation's own fork was released before it came (its FORK_DEL overtook
            # it and was parked): no worker references the value, so the owner keeps no
            # record of it (the serve still makes it, for nothing).
            if cancelled and not (rec.forks or rec.fetches) and self._owners.get(rref_id) is rec:
                del self._owners[rref_id]
            elif not cancelled and holder is not None:
                self._holders[(rref_id, fork)] = holder
        return rec

    def own_remote(self, rref_id: int) -> _OwnerRecord:
        """The record of a value this worker's ``remote()`` to itself will make: registered
        now, so the served ``remote()`` fills this record (the caller's RRef is its owner).
        """
        with self._lock:
            rec = self._owners[rref_id] = _OwnerRecord(rref_id, Future())
        return rec

    def drop_owned(self, rec: _OwnerRecord) -> None:
        """Forget ``rec`` if no fork or fetch holds it (a ``remote()`` to itself that failed
        before it was sent)."""
        with self._lock:
            if not (rec.forks or rec.fetches) and self._owners.get(rec.id) is rec:
                del self._owners[rec.id]

    def wait_fork(self, rref_id: int, fork: int) -> bool:
        """True once ``fork`` of ``rref_id`` is registered here (its FORK_ADD has come);
        False if it is not within ``rpc_timeout`` (with none, the default's)."""
        timeout = self._options.rpc_timeout
        end = time.monotonic() + (timeout if timeout > 0 else DEFAULT_RPC_TIMEOUT_S)
        pause = 0.0005
        while True:
            with self._lock:
                rec = self._owners.get(rref_id)
                if rec is not None and fork in rec.forks:
                    return True
            if time.monotonic() > end:
                return False
            time.sleep(pause)  # the FORK_ADD comes from another worker: it is nearly here
            pause = min(pause * 2, 0.05)

    def lookup(self, rref_id: int) -> _OwnerRecord | None:
        with self._lock:
            return self._owners.get(rref_id)

    def lookup_or_pending(
        self, rref_id: int, what: str = "a fetch", sender: Any = None
    ) -> _OwnerRecord:
        """The record of ``rref_id``, or a placeholder if its creating ``remote()`` call has
        not arrived yet (a user on another worker can reach the owner first, as in
        tensorplay, where the owner then waits for the value to be created). A live user
        RRef keeps its record alive, so a missing record means "not created yet"; the
        placeholder lives at most ``rpc_timeout`` unless the creation comes (see the module
        docstring). ``what`` (from ``sender``) named the id, for the error if it never comes.

        Raises:
          DecodeError: ``rref_id`` is not an integer.
        """
        if type(rref_id) is not int:
            raise _codec.DecodeError(f"{what}: RRef id {rref_id!r} is not an integer")
        with self._lock:
            rec = self._owners.get(rref_id)
            if rec is None:
                rec = self._placeholder(rref_id, what, sender)
            return rec

    def _placeholder(self, rref_id: int, what: str, sender: Any) -> _OwnerRecord:
        """A record for a value not created yet, dropped after ``rpc_timeout`` unless its
        ``remote()`` comes. The caller holds the lock."""
        rec = self._owners[rref_id] = _OwnerRecord(rref_id, Future())
        timeout = self._options.rpc_timeout
        if timeout > 0:
            rec.origin = (what, sender, timeout)
            rec.expiry = key = next(self._keys)
            self._expiring[key] = rec
            self._deadlines.add(time.monotonic() + timeout, key)
        return rec

    def _park_delete(self, rref_id: int, fork: int, sender: Any) -> None:
        """Hold a FORK_DEL until its FORK_ADD comes, at most ``rpc_timeout``. The caller
        holds the lock."""
        if (rref_id, fork) in self._parked:
            return
        timeout = self._options.rpc_timeout
        key = next(self._keys) if timeout > 0 else 0
        self._parked[(rref_id, fork)] = key
        if key:
            self._expiring[key] = (rref_id, fork, sender, timeout)
            self._deadlines.add(time.monotonic() + timeout, key)

    def _expired(self, key: int) -> None:
        """Deadline ``key`` passed: a parked fetch, a placeholder or a parked FORK_DEL."""
        if key in self._fetches:
            self._fetch_expired(key)
            return
        with self._lock:
            item = self._expiring.pop(key, None)
            if isinstance(item, _OwnerRecord):
                item.expiry = 0
                if item.created:
                    return
                if self._owners.get(item.id) is item:
                    del self._owners[item.id]
            elif item is not None and self._parked.get(item[:2]) == key:
                del self._parked[item[:2]]
        me = self._me
        if isinstance(item, _OwnerRecord):
            what, sender, timeout = item.origin  # type: ignore[misc]
            msg = (
                f"RRef {item.id:#x} was never created on worker {me.name!r} (rank {me.id}): "
                f"{what}{_from(sender)} named it, and no remote() made it within "
                f"rpc_timeout={timeout:g} s (was it deleted already, or made in another RPC "
                "session?)"
            )
            log.warning("rpc: %s; its record is dropped", msg)
            item.value._try_set_exception(RpcTimeoutError(msg))
        elif item is not None:
            rref_id, fork, sender, timeout = item
            log.warning(
                "rpc: worker %r dropped a release of RRef %#x (fork %#x)%s: no FORK_ADD for "
                "that fork came within rpc_timeout=%g s",
                me.name,
                rref_id,
                fork,
                _from(sender),
                timeout,
            )

    def fetch(self, record: _OwnerRecord, link: Any, timeout: float) -> Future:
        """The Future to answer a FETCH of ``record`` from ``link`` with, once it is done.

        The record's own value when it is set; else a parked fetch, which gets the value
        when it is set, fails when ``link`` closes (:meth:`requester_gone`) and, while no
        ``remote()`` has created the value, after ``timeout`` seconds (0: no limit). A
        fetch whose link closed before it got here (its serve was queued behind others)
        fails at once: ``requester_gone`` has run for that link, or runs after this lock
        and finds the fetch (a link is not ``alive`` before its ``on_closed``).
        """
        with self._lock:
            if record.value.done():
                return record.value
            if not link.alive:
                gone: Future = Future()
                gone._try_set_exception(_requester_gone(record.id, link))
                return gone
            key = next(self._keys)
            parked = self._fetches[key] = _ParkedFetch(record, link, timeout)
            record.fetches += 1
        record.value.add_done_callback(lambda value: self._fetch_ready(key, value))
        if timeout > 0:
            self._deadlines.add(time.monotonic() + timeout, key)
        return parked.answer

    def _unpark(self, key: int, *, uncreated_only: bool = False) -> _ParkedFetch | None:
        """Take parked fetch ``key`` (None if it has ended) and drop its record if that is a
        placeholder nothing else needs. The caller holds the lock."""
        parked = self._fetches.get(key)
        if parked is None or (uncreated_only and parked.record.created):
            return None
        del self._fetches[key]
        rec = parked.record
        rec.fetches -= 1
        if not (rec.created or rec.forks or rec.fetches) and self._owners.get(rec.id) is rec:
            del self._owners[rec.id]
        return parked

    def _fetch_ready(self, key: int, value: Future) -> None:
        with self._lock:
            parked = self._unpark(key)
        if parked is not None:
            parked.answer._copy_from(value)

    def _fetch_expired(self, key: int) -> None:
        with self._lock:
            parked = self._unpark(key, uncreated_only=True)  # a creation under way may run on
        if parked is not None:
            me = self._me
            parked.answer._try_set_exception(
                RpcTimeoutError(
                    f"fetch: RRef {parked.record.id:#x} was never created on worker {me.name!r} "
                    f"(rank {me.id}): no remote() made it within its "
                    f"rpc_timeout={parked.timeout:g} s (was it deleted already, or made in "
                    "another RPC session?)"
                )
            )

    def requester_gone(self, link: Any) -> None:
        """``link`` closed: end its parked fetches (their answers have nowhere to go)."""
        with self._lock:
            keys = [k for k, p in self._fetches.items() if p.link is link]
            gone = [p for p in map(self._unpark, keys) if p is not None]
        for parked in gone:
            parked.answer._try_set_exception(_requester_gone(parked.record.id, link))

    def holder_gone(self, name: str, why: str) -> None:
        """Worker ``name`` left a dynamic group or died: drop the forks it held."""
        with self._lock:
            held = [k for k, holder in self._holders.items() if holder == name]
        for rref_id, fork in held:
            log.debug("rpc: releasing RRef %#x fork %#x: %s", rref_id, fork, why)
            self.del_fork(rref_id, fork)

    def fork_count(self) -> int:
        """How many forks (users elsewhere) of the values this worker owns are recorded."""
        with self._lock:
            return sum(len(rec.forks) for rec in self._owners.values())

    def owned_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._owners)

    # user side
    def track(self, rref: RRef) -> None:
        self._users.add(rref)

    def enqueue_delete(self, owner: WorkerInfo, rref_id: int, fork: int) -> None:
        # Called from __del__ (any thread, any time): only a queue put and a counter.
        if not self._stopped:
            self.queued_deletes += 1
            self._deletes.put((owner, rref_id, fork))

    def _deleter(self) -> None:
        while True:
            item = self._deletes.get()
            if item is None:
                return
            try:
                self._send_delete(*item)
            finally:
                self.queued_deletes -= 1

    def _send_delete(self, owner: WorkerInfo, rref_id: int, fork: int) -> Future | None:
        try:
            return with_retries(
                lambda: self._call(owner, FORK_DEL, extra=(rref_id, fork)), "an RRef's release"
            )
        except Exception as e:  # shutting down
            log.debug("rpc: could not release RRef %#x on %s: %s", rref_id, owner.name, e)
            return None

    def release_users(self) -> list[Future]:
        """Tell owners this worker no longer holds its user RRefs (graceful shutdown,
        ``api._delete_all_user_and_unforked_owner_rrefs``); the Futures of the releases."""
        sent = []
        for r in list(self._users):
            if r._fork is not None and not r._released:
                r._released = True
                fut = self._send_delete(r._owner, r._id, r._fork)
                if fut is not None:
                    sent.append(fut)
        return sent

    def stop(self) -> None:
        self._stopped = True
        self._deletes.put(None)
        self._deadlines.stop()


def _from(sender: Any) -> str:
    """`` from 'w1' (rank 1)`` for a WorkerInfo (an unknown peer's rank is -1), or ``""``."""
    if sender is None:
        return ""
    rank = f" (rank {sender.id})" if sender.id >= 0 else ""
    return f" from {sender.name!r}{rank}"
