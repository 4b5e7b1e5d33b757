"""The seam between the agent and its connections: the ``Link`` protocol and ``Inbound``.

Every transport's connections implement :class:`Link` (the built-in ones: the
socket links of ``_socket``, ``_local.LocalLink`` and ``_tcp.TcpLink``, and the
gRPC stream's ``_grpc.Link``; see ``transports``). The agent holds its
connections only as ``Link``\\ s, and hands every transport one
:class:`Inbound`, the three callbacks through which a link reports what
arrives. The contract:

- ``send`` is thread-safe and never blocks for long (a transport queues what
  its socket cannot take yet). Messages from one sender arrive in the order
  they were sent. Once the link is dead, ``send`` drops the message silently:
  the owner learns of the death from ``on_closed``, exactly once per link.
- ``on_message(link, msg)`` runs in the link's reading thread, one message at
  a time and in order, unless ``serves_inline()`` said work may run there
  and the transport then handed reading to another thread (see ``_local``).
  The ``msg`` buffers may be views on shared memory: hold them no longer
  than needed.
- ``on_malformed(link, err)``: a message that could not be unpacked; the owner
  answers with an error (message id 0). The link stays usable, unless the
  stream cannot be read past it (a socket link then hangs up, see ``_socket``).
  A peer that gets such an answer closes its link, naming the error: its
  calls on it fail at once.
- ``on_closed(link, reason)``: the link ended (closed here, by the peer, or
  broken); ``alive`` is already False.
- ``close(reason)`` ends the link from this side (idempotent); ``on_closed``
  follows from the reading thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from tensorplay_jax.rpc._framing import Message

__all__ = ["Inbound", "Link", "LinkSet", "inbound_of"]


class Link(Protocol):
    """One end of a connection to a peer worker (see the module docstring for the contract)."""

    peer: str  # the worker at the other end, by name
    alive: bool  # False once the link closed or broke

    def send(self, env: bytes, header: bytes, buffers: Sequence[Any] = ()) -> None:
        """Send one message: its envelope, codec header and buffers (see ``_framing``)."""
        ...

    def close(self, reason: str = "") -> None:
        """End the link from this side (``reason``: what ``on_closed`` reports, if given)."""
        ...

    def serves_inline(self) -> bool:
        """Whether ``on_message`` may do a request's work itself (else the agent's pool does)."""
        ...


class Inbound(NamedTuple):
    """What a link reports to its owner (the agent): the three callbacks of the contract."""

    on_message: Callable[[Any, Message], None]
    on_malformed: Callable[[Any, Exception], None]
    on_closed: Callable[[Any, str], None]


def inbound_of(inbound: Inbound | None, callbacks: dict[str, Any]) -> Inbound:
    """``inbound``, or one made of the three callbacks given by keyword instead.

    Transport constructors take either (tests and raw clients pass the callbacks).

    Example:
      >>> cb = inbound_of(None, {"on_message": print, "on_malformed": print, "on_closed": print})
      >>> inbound_of(cb, {}) is cb
      True
    """
    if inbound is None:
        return Inbound(**callbacks)
    if callbacks:
        raise TypeError(f"pass inbound= or the callbacks {sorted(callbacks)}, not both")
    return inbound


class LinkSet:
    """The links one server accepted and that have not closed yet, for its ``stop``."""

    def __init__(self, inbound: Inbound) -> None:
        self._inbound = inbound
        self._links: set[Any] = set()
        self._lock = threading.Lock()
        self._stopped = False

    def add(self, link: Any) -> Inbound | None:
        """Keep ``link`` until it closes; the ``Inbound`` to read it with (its ``on_closed``
        forgets the link first), or None once the server stopped (``link`` is not kept)."""
        with self._lock:
            if self._stopped:
                return None
            self._links.add(link)
        return self._inbound._replace(on_closed=self._closed)

    def _closed(self, link: Any, reason: str) -> None:
        with self._lock:
            self._links.discard(link)
        self._inbound.on_closed(link, reason)

    def __iter__(self) -> Iterator[Any]:
        """The links open now (a snapshot)."""
        with self._lock:
            return iter(list(self._links))

    def stop(self) -> list[Any]:
        """Take no more links; those still open (for the server to close)."""
        with self._lock:
            self._stopped = True
            return list(self._links)
