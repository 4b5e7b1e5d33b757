"""A worker's transports and its links to the peers: serving, advertising, connecting.

:class:`Connections`, one per agent, holds the transports the worker serves
(in the order of its list, see ``rpc/transports``) and connects to the peers
of ``_peers.Peers`` through what each advertised in its rendezvous entry,
keeping one live link per peer there. A peer is reached through the first
transport that reaches it; when a connection through one fails, through the
next (the agent's calls fail only when none connects).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tensorplay_jax.rpc._errors import RpcPeerError
from tensorplay_jax.rpc._link import Link
from tensorplay_jax.rpc._peers import Peers
from tensorplay_jax.rpc._types import WorkerInfo
from tensorplay_jax.rpc.transports import Site, Transport, carrying_tls, make_transports

__all__ = ["Connections"]

log = logging.getLogger(__name__)


class Connections:
    """This worker's transports and live links (see the module docstring).

    Args:
      peers: the workers to connect to; their entries, and the links kept (under
        ``peers.lock``).

    Attributes:
      site: this worker's side of every link (set by ``serve``).
      transports: (name, transport) for each transport served, in order.
    """

    def __init__(self, peers: Peers) -> None:
        self._peers = peers
        self.site: Site | None = None
        self.transports: list[tuple[str, Transport]] = []

    def serve(self, site: Site, names: Sequence[str]) -> None:
        """Start the transports ``names`` in order (with TLS on, those that carry it).

        Raises:
          ValueError: an unknown name, or TLS on and no transport of ``names`` carries it.
        """
        self.site = site
        chosen = make_transports(names)
        if site.tls is not None:
            # TLS keeps every byte on a transport that carries it.
            chosen = [(name, t) for name, t in chosen if t.tls]
            if not chosen:
                raise ValueError(
                    f"init_rpc: TLS is on, and none of transports={list(names)!r} carries it; "
                    f"add one that does: {', '.join(map(repr, carrying_tls()))}"
                )
        for name, transport in chosen:
            if transport.serve(site):
                self.transports.append((name, transport))

    def get(self, name: str) -> Transport | None:
        """The transport ``name`` if this worker serves it, else None."""
        return next((t for n, t in self.transports if n == name), None)

    def address(self, fallback: str) -> str:
        """This worker's address as people read it: the ``address`` of the first transport
        served that has one (see ``Transport``), else ``fallback``."""
        found = (getattr(t, "address", None) for _, t in self.transports)
        return next((a for a in found if isinstance(a, str) and a), fallback)

    def advertised(self) -> dict[str, Any]:
        """What each transport puts in this worker's rendezvous entry, by its name."""
        return {name: transport.advertise() for name, transport in self.transports}

    def premade(self, to: WorkerInfo) -> Link | None:
        """A link to ``to`` if it needs one and connecting may wait on the network: made
        before the caller takes the lock (a round trip or more; a timeout, if the host is
        gone)."""
        link = self._peers.links.get(to.id)
        if link is not None and link.alive:
            return None
        entry = self._peers.entry(to.id)
        first = next((t for n, t in self.transports if t.reaches(entry.get(n))), None)
        return self._connect(to) if first is not None and first.slow_connect else None

    def link_for(self, to: WorkerInfo, made: Link | None = None) -> Link:
        """The live link to ``to`` (the caller holds the lock): the one kept, else ``made``
        (connected before the lock was taken), else a new one."""
        links = self._peers.links
        link = links.get(to.id)
        if link is not None and link.alive:
            if made is not None:
                made.close()  # another thread connected first
            return link
        link = links[to.id] = made if made is not None else self._connect(to)
        return link

    def forget(self, link: Link) -> None:
        """Drop ``link``, closed (the caller holds the lock)."""
        links = self._peers.links
        for rank, kept in list(links.items()):
            if kept is link:
                del links[rank]

    def _connect(self, to: WorkerInfo) -> Link:
        """A new link to ``to``: through the first transport that reaches it, else the next.

        Raises:
          RpcPeerError: no transport reaches ``to``, or every connection failed.
        """
        entry = self._peers.entry(to.id)
        failed = []
        for name, transport in self.transports:
            if not transport.reaches(entry.get(name)):
                continue
            try:
                return transport.connect(to.name, entry[name])
            except OSError as e:
                log.warning(
                    "rpc: no %s link to %s (%s); trying the next transport", name, to.name, e
                )
                failed.append(f"{name}: {e}")
        raise RpcPeerError(
            f"rpc: cannot reach worker {to.name!r} (rank {to.id}) through transports "
            f"{[n for n, _ in self.transports]}: " + ("; ".join(failed) or "none reaches it")
        )

    def close(self, grace: float) -> None:
        """Close every link (the caller holds no lock), then stop every transport."""
        with self._peers.lock:
            links = list(self._peers.links.values())
        for link in links:
            link.close()
        for _, transport in self.transports:
            transport.stop(grace)
