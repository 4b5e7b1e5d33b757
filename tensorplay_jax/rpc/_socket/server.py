"""Serving and connecting on stream sockets: the accept loop, and a client link's reader.

:class:`SocketServer` accepts on a listening socket, authenticates each
connection (``runtime.handshake`` under the transport's magic string) before
it reads anything else from it, and reads it as a link in the accepting
thread; :func:`start_reading` reads a client link's replies in a thread of
its own. Both hand what arrives to the owner's ``Inbound`` (see ``rpc/_link``).
A transport subclasses the server for its listening socket and link type,
and :class:`SocketTransport` for what the agent holds of it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from tensorplay_jax.rpc._link import Inbound, LinkSet, inbound_of
from tensorplay_jax.rpc._socket.link import SocketLink
from tensorplay_jax.runtime import handshake

if TYPE_CHECKING:
    from tensorplay_jax.rpc._transport import Site

__all__ = ["ClientEnd", "SocketServer", "SocketTransport", "start_reading"]


class ClientEnd(NamedTuple):
    """This worker's end of a connection it opens (``connect_local``, ``connect_tcp``).

    Attributes:
      peer: the worker at the other end, by name.
      me: this worker's name (it authenticates as that).
      secret: the job secret the handshake proves.
      inbound: where the link reports what arrives (the replies).
      max_threads: the most reading threads the link may use.
    """

    peer: str
    me: str
    secret: str
    inbound: Inbound
    max_threads: int = 17


class SocketServer:
    """Accepts connections on ``sock`` (listening); reports what arrives on each to ``inbound``.

    Subclasses set ``_link_type`` (the ``SocketLink`` to read each connection as)
    and ``_magic`` (the handshake's protocol name), and may ``_tune`` accepted
    sockets. Raw clients and tests may pass the three ``Inbound`` callbacks by
    keyword instead of ``inbound``.
    """

    _link_type: type[SocketLink] = SocketLink
    _magic = b""

    def __init__(
        self,
        sock: socket.socket,
        *,
        secret: str,
        inbound: Inbound | None = None,
        max_threads: int = 17,
        **callbacks: Callable[..., None],
    ) -> None:
        self._secret = secret.encode()
        self._max_threads = max_threads
        self._links = LinkSet(inbound_of(inbound, callbacks))
        self._sock = sock
        kind = self._link_type._kind
        threading.Thread(target=self._accept, name=f"tpj-rpc-{kind}-accept", daemon=True).start()

    def _tune(self, conn: socket.socket) -> None:
        """Set socket options on an authenticated connection (none here)."""

    def _new_link(self, conn: socket.socket, peer: str) -> SocketLink:
        """The link of an authenticated connection from ``peer`` (a ``_link_type``)."""
        return self._link_type(conn, peer, self._max_threads)

    def _accept(self) -> None:
        kind = self._link_type._kind
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name=f"tpj-rpc-{kind}-serve", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        peer = handshake.accept(conn, self._secret, self._magic)
        if peer is None:
            return
        self._tune(conn)
        link = self._new_link(conn, peer)
        inbound = self._links.add(link)
        if inbound is None:  # stopped meanwhile
            conn.close()
            return
        link.read_forever(inbound)

    def stop(self) -> None:
        """Accept no more connections and close those open."""
        links = self._links.stop()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for link in links:
            link.close()


def start_reading(link: SocketLink, inbound: Inbound) -> SocketLink:
    """Read ``link`` (a client's end) in a thread of its own; returns ``link``."""
    threading.Thread(
        target=link.read_forever,
        args=(inbound,),
        name=f"tpj-rpc-{link._kind}-link-{link.peer}",
        daemon=True,
    ).start()
    return link


class SocketTransport:
    """What the socket transports share as the agent holds them (``rpc/transports``):
    their server, this worker's ``Site`` and ``stop``; a subclass serves, advertises,
    reaches and connects."""

    tls = False  # a plain socket carries no TLS: with TLS on the agent leaves it out

    def __init__(self) -> None:
        self.server: SocketServer | None = None
        self._site: Site | None = None

    def _end(self, peer: str) -> ClientEnd:
        """This worker's end of a connection to ``peer``, from its site."""
        site = self._site
        assert site is not None, "serve() first"
        return ClientEnd(peer, site.me, site.secret, site.inbound, site.max_threads)

    def stop(self, grace: float = 0.0) -> None:
        """Stop the server (its links close at once: ``grace`` is for streams that drain)."""
        if self.server is not None:
            self.server.stop()
