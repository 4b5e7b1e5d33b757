"""The workers one agent knows, and its links to them: :class:`Peers`, with add and remove.

One :class:`Peers` per agent. The rendezvous (a fixed-size group) or the
group's change log (a dynamic group, ``_membership``) adds each worker with
its rendezvous entry; a dynamic group removes those that leave or die. The
transports (``_connections``) connect through what a peer advertised in its
entry and keep one live link per peer here; the dispatcher reads who a caller
is and whether it runs this worker's main script.

The agent's lock is this object's (:attr:`Peers.lock`): see the class.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc._types import WorkerInfo

if TYPE_CHECKING:
    from tensorplay_jax.rpc._link import Link

__all__ = ["Peers"]


class Peers:
    """The workers this worker knows (itself included), their entries and the links to them.

    The lock. :attr:`lock` is made here, and this object is its one owner. It
    guards this table and the links, and, because they change together with
    them, the in-flight table (``_inflight``: a call is recorded with the link
    it goes on; removing a peer fails the calls pending to it) and the agent's
    ``stopped`` flag. The agent hands this lock to ``InFlight`` and
    ``Connections`` (through this object); nothing else makes one for them.

    Args:
      me: this worker.

    Attributes:
      lock: the agent's lock (see above).
      me: this worker.
      main: what this worker's main script is (``_objref.main_identity``), set at start-up.
      workers: name -> WorkerInfo of every worker known now.
      by_id: rank -> WorkerInfo of every worker known now.
      same_main: the names of the workers that run this worker's main script (its
        functions travel to them by name; see ``_objref``), itself included.
      links: rank -> the live link to that worker (kept by ``Connections``).

    Example:
      >>> peers = Peers(WorkerInfo("w0", 0))
      >>> with peers.lock:
      ...     peers.add(WorkerInfo("w1", 1), {"addr": "10.0.0.2:5000"})
      >>> peers.workers["w1"], peers.address(1), "w1" in peers.same_main
      (WorkerInfo(name='w1', id=1), '10.0.0.2:5000', False)
      >>> with peers.lock:
      ...     peers.remove("w1")
      (WorkerInfo(name='w1', id=1), None)
      >>> sorted(peers.workers)
      []
    """

    def __init__(self, me: WorkerInfo) -> None:
        self.lock = threading.Lock()
        self.me = me
        self.main: str | None = None
        self.workers: dict[str, WorkerInfo] = {}
        self.by_id: dict[int, WorkerInfo] = {}
        self.same_main: set[str] = set()
        self.links: dict[int, Link] = {}
        self._entries: dict[int, dict[str, Any]] = {}

    def add(self, info: WorkerInfo, entry: dict[str, Any]) -> None:
        """Know worker ``info`` by its rendezvous ``entry`` (hold :attr:`lock`).

        The entry holds what each transport advertised (under the transport's
        name), the worker's address (``"addr"``) and its main script (``"main"``).
        """
        self.workers[info.name] = info
        self.by_id[info.id] = info
        self._entries[info.id] = entry
        if info.name == self.me.name or (self.main is not None and entry.get("main") == self.main):
            self.same_main.add(info.name)

    def remove(self, name: str) -> tuple[WorkerInfo, Link | None]:
        """Forget worker ``name`` (hold :attr:`lock`); its info and its link (not closed),
        if any. Its rank's entry and link stay if another worker holds that rank now."""
        info = self.workers.pop(name)
        link = None
        if self.by_id.get(info.id) is info:
            del self.by_id[info.id]
            self._entries.pop(info.id, None)
            link = self.links.pop(info.id, None)
        self.same_main.discard(name)
        return info, link

    def entry(self, rank: int) -> dict[str, Any]:
        """The rendezvous entry of the worker ``rank`` (empty if none is known)."""
        return self._entries.get(rank, {})

    def address(self, rank: int) -> str | None:
        """The address the worker ``rank`` advertised (None if none is known)."""
        return self._entries.get(rank, {}).get("addr")
