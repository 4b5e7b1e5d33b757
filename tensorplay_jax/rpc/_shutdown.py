"""Shutting the agent down: the graceful barrier over the store, then stopping every part.

``wait_for_all_workers`` is the barrier of a graceful ``shutdown()``: rounds
over the rendezvous store until no worker has work left or in flight (with
the release of user RRefs in between, see ``_rref_table``). ``stop`` then
closes the links, the servers, the timers, the RRef table and the pool, and
leaves the store; every wait there is bounded (``runtime.settings``:
``RPC_SERVER_STOP_GRACE_S``, ``RPC_SHUTDOWN_EXIT_WAIT_S``,
``RPC_STORE_REPLY_GRACE_S``).

:class:`Shutdown` is a part of ``_agent.Agent`` (a base class of it), not an
object of its own: it works on the agent's state, listed in its class body.
"""

from __future__ import annotations

import gc
import itertools
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc._call_hooks import internal_target
from tensorplay_jax.rpc._rendezvous import StoreTimeout
from tensorplay_jax.runtime.settings import (
    RPC_SERVER_STOP_GRACE_S,
    RPC_SHUTDOWN_EXIT_WAIT_S,
    RPC_SHUTDOWN_PING_EVERY_S,
    RPC_SHUTDOWN_PING_TIMEOUT_S,
    RPC_STORE_REPLY_GRACE_S,
)

if TYPE_CHECKING:
    import concurrent.futures

    from tensorplay_jax.rpc import _local, _tcp
    from tensorplay_jax.rpc._deadlines import Deadlines
    from tensorplay_jax.rpc._grpc import Server
    from tensorplay_jax.rpc._link import Link
    from tensorplay_jax.rpc._rendezvous import StoreClient, StoreServer
    from tensorplay_jax.rpc._rref_table import RRefTable

__all__ = ["WHILE_ALIVE", "Shutdown"]

WHILE_ALIVE = -1.0  # wait_for_all_workers: no time limit while the missing workers answer


@internal_target
def _alive() -> bool:
    """The liveness ping of a graceful shutdown (served like any call)."""
    return True


class Shutdown:
    """The agent's shutdown (see the module docstring); ``Agent`` sets its state."""

    # The agent's state this part reads and updates (set in ``Agent.__init__``/``start``).
    name: str
    rank: int
    world_size: int
    stopped: bool
    activity: int
    rrefs: RRefTable
    store: StoreClient | None
    _store_server: StoreServer | None
    _server: Server | None
    _local_server: _local.LocalServer | None
    _tcp_server: _tcp.TcpServer | None
    _links: dict[int, Link]
    _pending: dict[int, Any]  # message id -> _agent._Pending
    _inflight: int
    _lock: threading.Lock
    _open: threading.Event
    _deadlines: Deadlines
    _executor: concurrent.futures.Executor

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

        ``timeout``: seconds (0: no limit), or :data:`WHILE_ALIVE`: no limit as
        long as every worker that has not arrived answers a ping
        (``RPC_SHUTDOWN_PING_EVERY_S``, each within ``RPC_SHUTDOWN_PING_TIMEOUT_S``),
        as tensorplay waits for a trainer still training; a worker that exits is
        skipped (the store sees its connection close), one that is stopped, hung
        or cut off fails the wait.

        Raises:
          TimeoutError: not done within ``timeout`` seconds, or a missing worker did
            not answer; the message names the ranks that did not arrive, or this
            worker's own unfinished work.
          ConnectionError: the store (rank 0) went away.
        """
        alive_mode = timeout == WHILE_ALIVE
        deadline = None if not timeout or alive_mode else time.monotonic() + timeout
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
            vals = self._wait_round(k, keys, timeout, deadline, alive_mode)
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

    def _wait_round(
        self, k: int, keys: dict[str, int], timeout: float, deadline: float | None, alive_mode: bool
    ) -> dict[str, Any]:
        """Round ``k``: publish this worker's count, wait for every key (or its rank dead)."""
        assert self.store is not None
        published = False
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            if alive_mode:
                left = RPC_SHUTDOWN_PING_EVERY_S
            try:
                if left is not None:
                    # A stopped or cut-off rank 0 never answers: give up on it in time.
                    grace = RPC_SHUTDOWN_PING_TIMEOUT_S if alive_mode else RPC_STORE_REPLY_GRACE_S
                    self.store.reply_timeout = left + grace
                if not published:
                    self.store.set(f"shutdown/{k}/{self.rank}", self.activity)
                    published = True
                vals, _ = self.store.wait(keys, left)
                return vals
            except StoreTimeout as e:
                if alive_mode:
                    silent = self._unanswered(e.missing)
                    if not silent:
                        continue  # still working: wait on, as tensorplay does
                    raise TimeoutError(
                        f"shutdown: worker {self.name!r} waited for every worker to finish "
                        f"its work: ranks {silent} did not arrive and do not answer a ping "
                        f"within {RPC_SHUTDOWN_PING_TIMEOUT_S:g} s (stopped, hung, or cut off "
                        "from this one?); pass timeout= to bound the wait instead"
                    ) from None
                bound = "for every" if alive_mode else f"timeout={timeout:g} s for every"
                raise TimeoutError(
                    f"shutdown: worker {self.name!r} waited {bound} worker to finish its "
                    f"work: {e} (stopped, hung, or cut off from this one?); pass a larger "
                    "timeout= to wait longer"
                ) from None
            except ConnectionError as e:
                if not alive_mode and (deadline is None or time.monotonic() < deadline):
                    raise  # rank 0 is gone
                if alive_mode and not isinstance(e.__cause__, TimeoutError):
                    raise
                bound = "" if alive_mode else f"timeout={timeout:g} s "
                raise TimeoutError(
                    f"shutdown: worker {self.name!r} waited {bound}for every "
                    f"worker to finish its work: ranks [0] did not arrive (its rendezvous "
                    f"store does not answer: {e}; stopped, hung, or cut off from this one?)"
                ) from None

    def _unanswered(self, ranks: list[int]) -> list[int]:
        """The ``ranks`` that do not answer a ping in time (a refused one is left to the store)."""
        from tensorplay_jax.rpc._protocol import CALL

        futs = {}
        for r in ranks:
            try:
                to = self.resolve(r, "shutdown")
                futs[r] = self.call(to, CALL, _alive, (), {}, RPC_SHUTDOWN_PING_TIMEOUT_S)
            except Exception:  # gone already: the store marks it dead
                continue
        silent = []
        end = time.monotonic() + RPC_SHUTDOWN_PING_TIMEOUT_S
        for r, fut in futs.items():
            try:
                fut.wait(max(end - time.monotonic(), 0.001))
            except TimeoutError:
                silent.append(r)
            except Exception:  # refused or reset: it is exiting, the store will know
                continue
        return silent

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
        if self._tcp_server is not None:
            self._tcp_server.stop()
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
