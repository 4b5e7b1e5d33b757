"""Serving and connecting on this host: ``LocalServer``, ``connect_local``, and where they work.

The server listens in Linux's abstract socket namespace (no file to clean up
if a worker dies); accepting, authenticating (``handshake``) and reading are
the socket base's (``rpc/_socket/server``). ``connect_local`` authenticates to
such a server and reads the replies in a thread of its own.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: this transport is unavailable there
    fcntl = None  # type: ignore[assignment]

from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._local import handshake
from tensorplay_jax.rpc._local.frames import _ANC
from tensorplay_jax.rpc._local.link import LocalLink
from tensorplay_jax.rpc._socket import ClientEnd
from tensorplay_jax.rpc._socket.server import SocketServer, SocketTransport, start_reading
from tensorplay_jax.rpc._transport import Site
from tensorplay_jax.runtime.address import net_namespace


def available() -> bool:
    """True where this transport works (Linux: abstract sockets, memfd, fd passing).

    Whether a job uses it is its transport list's business (``rpc/transports``;
    ``TENSORPLAY_JAX_RPC_LOCAL=0`` drops it from the default list).

    Example:
      >>> isinstance(available(), bool)  # False off Linux
      True
    """
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "memfd_create")
        and hasattr(fcntl, "F_ADD_SEALS")
        and hasattr(socket, "AF_UNIX")
        and _ANC > 0
    )


def host_id() -> str:
    """Names this host (kernel boot id, hostname, network namespace): equal ids mean the socket
    is reachable (abstract sockets live in a network namespace).

    Example:
      >>> host_id() == host_id() and host_id().endswith(socket.gethostname())
      True
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{boot}/{net_namespace()}/{socket.gethostname()}"


class LocalServer(SocketServer):
    """Accepts same-host connections; reports what arrives on each to ``inbound``.

    Raw clients and tests may pass the three ``Inbound`` callbacks by keyword instead.
    """

    _link_type = LocalLink
    _magic = handshake._MAGIC

    def __init__(
        self,
        *,
        secret: str,
        inbound: Inbound | None = None,
        max_threads: int = 17,
        **callbacks: Any,
    ) -> None:
        self.address = f"tensorplay-jax-rpc/{os.getpid()}/{secrets.token_hex(8)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind("\0" + self.address)
        sock.listen(128)
        super().__init__(sock, secret=secret, inbound=inbound, max_threads=max_threads, **callbacks)


def connect_local(address: str, end: ClientEnd) -> LocalLink:
    """Connect ``end`` to the same-host server at ``address``, authenticate, start reading
    replies.

    Raises:
      OSError: no such server here, or the handshake failed (use gRPC instead).
    """
    sock = handshake.connect(address, end.secret.encode(), end.me)
    link = LocalLink(sock, end.peer, end.max_threads)
    return start_reading(link, end.inbound)  # type: ignore[return-value]


class LocalTransport(SocketTransport):
    """The same-host transport as the agent holds it (``rpc/transports.Transport``).

    Advertises ``[host id, server address]``; reaches a peer whose host id is this
    one's (same kernel, network namespace and hostname).
    """

    slow_connect = False  # a same-host connection never waits on the network

    def serve(self, site: Site) -> bool:
        if not available():
            return False
        self._site, self._host = site, host_id()
        self.server = LocalServer(
            secret=site.secret, inbound=site.inbound, max_threads=site.max_threads
        )
        return True

    def advertise(self) -> Any:
        assert isinstance(self.server, LocalServer)
        return [self._host, self.server.address]

    def reaches(self, entry: Any) -> bool:
        return (
            self._site is not None
            and isinstance(entry, list)
            and len(entry) == 2
            and entry[0] == self._host
            and isinstance(entry[1], str)
        )

    def connect(self, peer: str, entry: Any) -> LocalLink:
        return connect_local(entry[1], self._end(peer))
