"""The graceful shutdown barrier over the rendezvous store, and leaving the store.

:class:`ShutdownBarrier`, one per agent once it has joined the store:
``wait_for_all_workers`` is the barrier of a graceful ``shutdown()``, rounds
over the store until no worker has work left or in flight (with the release
of user RRefs in between, see ``_rref_table``); ``leave`` is the last step of
the agent's ``stop``: tell the store this worker is done and (rank 0, graceful)
keep it up until the others are done too. Every wait there is bounded
(``runtime.settings``: ``RPC_SHUTDOWN_EXIT_WAIT_S``, ``RPC_STORE_REPLY_GRACE_S``).
"""

from __future__ import annotations

import gc
import itertools
import time
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc import _retries
from tensorplay_jax.rpc._errors import RpcTimeoutError
from tensorplay_jax.rpc._rendezvous import StoreTimeout
from tensorplay_jax.runtime.settings import (
    RPC_SHUTDOWN_PING_EVERY_S,
    RPC_SHUTDOWN_PING_TIMEOUT_S,
    RPC_STORE_REPLY_GRACE_S,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from tensorplay_jax.rpc._futures import Future
    from tensorplay_jax.rpc._inflight import InFlight
    from tensorplay_jax.rpc._rendezvous import StoreClient, StoreServer
    from tensorplay_jax.rpc._rref_table import RRefTable
    from tensorplay_jax.rpc._types import WorkerInfo

__all__ = ["WHILE_ALIVE", "ShutdownBarrier"]

WHILE_ALIVE = -1.0  # wait_for_all_workers: no time limit while the missing workers answer


class ShutdownBarrier:
    """The graceful barrier and the leaving of the store (see the module docstring).

    Args:
      name: this worker's name, ``rank`` its rank and ``world_size`` the job's size.
      store: this worker's connection to the rendezvous store; ``store_server`` the
        store itself, on rank 0 (None elsewhere).
      inflight: the agent's calls and served requests (``_inflight``).
      rrefs: the agent's RRef table (queued releases count as work; users let go
        of their RRefs between rounds).
      resolve: the agent's ``resolve``, and ``call`` its ``call``: the barrier pings
        the workers that have not arrived.
    """

    def __init__(
        self,
        *,
        name: str,
        rank: int,
        world_size: int,
        store: StoreClient,
        store_server: StoreServer | None,
        inflight: InFlight,
        rrefs: RRefTable,
        resolve: Callable[[Any, str], WorkerInfo],
        call: Callable[..., Future],
    ) -> None:
        self.name, self.rank, self.world_size = name, rank, world_size
        self.store, self._store_server = store, store_server
        self._flight = inflight
        self._rrefs = rrefs
        self._resolve, self._call = resolve, call

    def outstanding(self) -> int:
        """This worker's work left: calls, served requests, queued RRef releases and
        bookkeeping messages waiting to be sent again (``_retries``)."""
        return self._flight.outstanding() + self._rrefs.queued_deletes + _retries.waiting()

    def outstanding_detail(self) -> str:
        """What :meth:`outstanding` counts, in words."""
        return (
            f"{self._flight.detail()}, {self._rrefs.queued_deletes} RRef release(s) queued, "
            f"{_retries.waiting()} message(s) to send again"
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
          RpcTimeoutError: (a ``TimeoutError`` and, as tensorplay, a ``RuntimeError``) not
            done within ``timeout`` seconds, or a missing worker did
            not answer; the message names the ranks that did not arrive, or this
            worker's own unfinished work.
          ConnectionError: the store (rank 0) went away.
        """
        alive_mode = timeout == WHILE_ALIVE
        deadline = None if not timeout or alive_mode else time.monotonic() + timeout
        prev: dict[int, Any] | None = None
        released = False
        for k in itertools.count():
            while self.outstanding():
                if deadline is not None and time.monotonic() > deadline:
                    raise RpcTimeoutError(
                        f"shutdown: worker {self.name!r} still has {self.outstanding()} RPCs "
                        f"outstanding after {timeout:g} s ({self.outstanding_detail()}); "
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
                self._rrefs.release_users()
                cur = None
            prev = cur

    def _wait_round(
        self, k: int, keys: dict[str, int], timeout: float, deadline: float | None, alive_mode: bool
    ) -> dict[str, Any]:
        """Round ``k``: publish this worker's count, wait for every key (or its rank dead)."""
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
                    self.store.set(f"shutdown/{k}/{self.rank}", self._flight.handled)
                    published = True
                vals, _ = self.store.wait(keys, left)
                return vals
            except StoreTimeout as e:
                if alive_mode:
                    silent = self._unanswered(e.missing)
                    if not silent:
                        continue  # still working: wait on, as tensorplay does
                    raise RpcTimeoutError(
                        f"shutdown: worker {self.name!r} waited for every worker to finish "
                        f"its work: ranks {silent} did not arrive and do not answer a ping "
                        f"within {RPC_SHUTDOWN_PING_TIMEOUT_S:g} s (stopped, hung, or cut off "
                        "from this one?); pass timeout= to bound the wait instead"
                    ) from None
                bound = "for every" if alive_mode else f"timeout={timeout:g} s for every"
                raise RpcTimeoutError(
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
                raise RpcTimeoutError(
                    f"shutdown: worker {self.name!r} waited {bound}for every "
                    f"worker to finish its work: ranks [0] did not arrive (its rendezvous "
                    f"store does not answer: {e}; stopped, hung, or cut off from this one?)"
                ) from None

    def _unanswered(self, ranks: list[int]) -> list[int]:
        """The ``ranks`` that do not answer a ping in time (a refused one is left to the store)."""
        from tensorplay_jax.rpc._protocol import PING

        futs = {}
        for r in ranks:
            try:
                to = self._resolve(r, "shutdown")
                futs[r] = self._call(to, PING, None, (), {}, RPC_SHUTDOWN_PING_TIMEOUT_S)
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

    def leave(self, *, graceful: bool, wait: float) -> None:
        """Tell the store this worker is done, then close the connection to it.

        Rank 0, when ``graceful``, first keeps the store up for up to ``wait``
        seconds until every worker has said so (each store reply waits at most
        ``RPC_STORE_REPLY_GRACE_S`` more: a stopped rank 0 costs that much once).
        """
        store = self.store
        try:
            store.reply_timeout = RPC_STORE_REPLY_GRACE_S
            store.add("shutdown/exit", 1)
            if self._store_server is not None and graceful and self.world_size is not None:
                store.reply_timeout = wait + RPC_STORE_REPLY_GRACE_S
                store.wait_count("shutdown/exit", self.world_size, wait)
        except (ConnectionError, OSError):
            pass
        store.reply_timeout = RPC_STORE_REPLY_GRACE_S
        store.close(clean=graceful)
