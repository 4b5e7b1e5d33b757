"""What a transport is: the ``Transport`` protocol, the ``Site`` it serves, the TLS material.

The registry of transports by name, and the table of the built-in ones, are
``rpc/transports``; the transports themselves (``_local``, ``_tcp``,
``_grpc``) build on this module only, so that the table can import them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

from tensorplay_jax.rpc._link import Inbound, Link

__all__ = ["Site", "TlsConfig", "Transport"]


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS material (PEM bytes or file paths).

    Attributes:
      cert_chain: this worker's certificate chain (server side, and client side for mutual TLS).
      private_key: the key for ``cert_chain``.
      root_certs: CA certificates that sign the peers' certificates.
      server_name: the name to check in the server certificate, when it is not the address.
      require_client_auth: servers also demand a client certificate (mutual TLS).
    """

    cert_chain: bytes | str | Path
    private_key: bytes | str | Path
    root_certs: bytes | str | Path
    server_name: str | None = None
    require_client_auth: bool = False


@dataclasses.dataclass(frozen=True)
class Site:
    """What a transport needs to serve and connect: this worker's side of every link.

    Attributes:
      me: this worker's name (it authenticates as that to the peers).
      secret: the job secret every connection proves before it is read.
      inbound: where every link reports what arrives (the agent's callbacks).
      max_threads: the most reading threads a socket link may use.
      listen: the address servers bind.
      advertise: the host the other workers reach this one by.
      port: the port the gRPC server binds (0: any free one).
      max_streams: the most gRPC streams served at once.
      tls: the TLS material (:class:`TlsConfig`), or None.

    Example:
      >>> site = Site(me="w0", secret="s3cret", inbound=None, max_threads=17,
      ...             listen="0.0.0.0", advertise="10.0.0.2")
      >>> site.port, site.tls is None
      (0, True)
    """

    me: str
    secret: str
    inbound: Inbound
    max_threads: int
    listen: str
    advertise: str
    port: int = 0
    max_streams: int = 16
    tls: TlsConfig | None = None


class Transport(Protocol):
    """One way to reach peers (see the module docstring for its life in a worker).

    Attributes:
      tls: whether it carries TLS (with TLS on, the agent keeps only these).
      slow_connect: whether ``connect`` may wait on the network (a round trip,
        or a timeout if the peer's host is gone): the agent then connects
        before it takes its lock.

    Optionally, once serving, an ``address`` attribute (a ``host:port`` string):
    this worker's address on the transport as people read it. The agent puts the
    first served transport's into its rendezvous entry (``addr``), and errors
    about a lost connection name it.
    """

    tls: bool
    slow_connect: bool

    def serve(self, site: Site) -> bool:
        """Start accepting connections; False where this transport cannot work here."""
        ...

    def advertise(self) -> Any:
        """What the peers need to connect (a JSON value for the rendezvous entry)."""
        ...

    def reaches(self, entry: Any) -> bool:
        """Whether a peer that advertised ``entry`` (None: nothing) can be reached this way."""
        ...

    def connect(self, peer: str, entry: Any) -> Link:
        """A new authenticated link to worker ``peer``, reading its replies.

        Raises:
          OSError: the connection failed (the agent tries the next transport).
        """
        ...

    def stop(self, grace: float) -> None:
        """Accept no more connections and close those this transport accepted, giving open
        streams at most ``grace`` seconds to finish (a transport may close them at once)."""
        ...
