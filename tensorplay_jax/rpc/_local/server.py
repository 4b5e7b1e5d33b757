"""Serving and connecting on this host: ``LocalServer``, ``connect_local``, and where they work.

The server listens in Linux's abstract socket namespace (no file to clean up
if a worker dies), authenticates each connection (``handshake``) and reads it
in the accepting thread; ``connect_local`` authenticates to such a server and
reads the replies in a thread of its own. Both hand what arrives to the
owner's ``Inbound`` (see ``rpc/_link``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import threading
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: this transport is unavailable there
    fcntl = None  # type: ignore[assignment]

from tensorplay_jax.rpc._link import Inbound, LinkSet, inbound_of
from tensorplay_jax.rpc._local import handshake
from tensorplay_jax.rpc._local.frames import _ANC
from tensorplay_jax.rpc._local.link import LocalLink
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.address import net_namespace
from tensorplay_jax.runtime.settings import LOCAL_TRANSPORT_ENV


def available() -> bool:
    """True where this transport works (Linux: abstract sockets, memfd, fd passing).

    Example:
      >>> isinstance(available(), bool)  # False off Linux or with TENSORPLAY_JAX_RPC_LOCAL=0
      True
    """
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "memfd_create")
        and hasattr(fcntl, "F_ADD_SEALS")
        and hasattr(socket, "AF_UNIX")
        and _ANC > 0
        and settings.get_str(LOCAL_TRANSPORT_ENV) != "0"
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


class LocalServer:
    """Accepts same-host connections; reports what arrives on each to ``inbound``.

    Raw clients and tests may pass the three ``Inbound`` callbacks by keyword instead.
    """

    def __init__(
        self,
        *,
        secret: str,
        inbound: Inbound | None = None,
        max_threads: int = 17,
        **callbacks: Any,
    ) -> None:
        self._secret = secret.encode()
        self._max_threads = max_threads
        self._links = LinkSet(inbound_of(inbound, callbacks))
        self.address = f"tensorplay-jax-rpc/{os.getpid()}/{secrets.token_hex(8)}"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind("\0" + self.address)
        self._sock.listen(128)
        threading.Thread(target=self._accept, name="tpj-rpc-local-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name="tpj-rpc-local-serve", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        peer = handshake.accept(conn, self._secret)
        if peer is None:
            return
        link = LocalLink(conn, peer, self._max_threads)
        inbound = self._links.add(link)
        if inbound is None:  # stopped meanwhile
            conn.close()
            return
        link.read_forever(inbound)

    def stop(self) -> None:
        links = self._links.stop()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for link in links:
            link.close()


def connect_local(
    address: str,
    *,
    peer: str,
    secret: str,
    me: str,
    inbound: Inbound | None = None,
    max_threads: int = 17,
    **callbacks: Any,
) -> LocalLink:
    """Connect to the same-host server at ``address``, authenticate, start reading replies.

    Takes the owner's ``inbound``, or its three callbacks by keyword.

    Raises:
      OSError: no such server here, or the handshake failed (use gRPC instead).
    """
    inbound = inbound_of(inbound, callbacks)
    link = LocalLink(handshake.connect(address, secret.encode(), me), peer, max_threads)
    threading.Thread(
        target=link.read_forever,
        args=(inbound,),
        name=f"tpj-rpc-local-link-{peer}",
        daemon=True,
    ).start()
    return link
