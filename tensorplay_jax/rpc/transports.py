"""RPC transports as plug-ins: the ``Transport`` protocol and the registry of transports by name.

Modelled on torch's ``distributed/rpc/backend_registry``. A transport is one
way for the agent to reach a peer worker; the agent holds an ordered list of
them and connects to each peer through the first one that reaches it, trying
the next when a connection fails:

- ``"local"``: a Unix socket with large buffers in shared memory, for peers on
  this host (``rpc/_local``; Linux only);
- ``"tcp"``: a plain authenticated TCP connection, for peers anywhere
  (``rpc/_tcp``);
- ``"grpc"``: a gRPC stream, the one transport that carries TLS, and the last
  resort of the default list (``rpc/_grpc``).

The list is ``GrpcRpcBackendOptions(transports=[...])`` (names), by default
:func:`default_transports`: all three, less ``"local"`` with
``TENSORPLAY_JAX_RPC_LOCAL=0`` and ``"tcp"`` with ``TENSORPLAY_JAX_RPC_TCP=0``.
With TLS on the agent keeps only the transports that carry it (``tls``).

The life of a transport in a worker (see :class:`Transport`): the agent makes
it (its factory, with no arguments), has it ``serve`` (start accepting),
publishes what it ``advertise``\\ s in the worker's rendezvous entry under the
transport's name, asks it whether it ``reaches`` each peer (from what the
peer advertised under that name), ``connect``\\ s through it, and ``stop``\\ s it
at shutdown. A link it returns implements ``rpc/_link.Link`` and reports to
``Site.inbound``.

Adding a transport is one module and one :func:`register_transport` call,
made in every worker before ``init_rpc``::

    class CountingTransport(registered_transport("tcp")):  # TCP, counting connections
        connects = 0

        def connect(self, peer, entry):
            CountingTransport.connects += 1
            return super().connect(peer, entry)

    register_transport("counting", CountingTransport)
    init_rpc("w0", rank=0, world_size=2,
             rpc_backend_options=GrpcRpcBackendOptions(transports=["counting", "grpc"]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tensorplay_jax.rpc._link import Inbound, Link
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import LOCAL_TRANSPORT_ENV, TCP_TRANSPORT_ENV

__all__ = [
    "Site",
    "Transport",
    "check_transports",
    "default_transports",
    "make_transports",
    "register_transport",
    "registered_transport",
    "registered_transports",
]


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
      tls: the TLS material (``rpc/_grpc.TlsConfig``), or None.

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
    tls: Any = None


class Transport(Protocol):
    """One way to reach peers (see the module docstring for its life in a worker).

    Attributes:
      tls: whether it carries TLS (with TLS on, the agent keeps only these).
      slow_connect: whether ``connect`` may wait on the network (a round trip,
        or a timeout if the peer's host is gone): the agent then connects
        before it takes its lock.
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


_REGISTRY: dict[str, Callable[[], Transport]] = {}


def register_transport(name: str, factory: Callable[[], Transport]) -> None:
    """Make ``factory`` (a class, or any function of no arguments) the transport ``name``.

    Raises:
      ValueError: ``name`` is taken.

    Example:
      >>> from tensorplay_jax.rpc._tcp import TcpTransport
      >>> register_transport("tcp", TcpTransport)
      Traceback (most recent call last):
      ...
      ValueError: register_transport: a transport named 'tcp' is registered already
    """
    if name in _REGISTRY:
        raise ValueError(f"register_transport: a transport named {name!r} is registered already")
    _REGISTRY[name] = factory


def registered_transport(name: str) -> Callable[[], Transport]:
    """The factory registered as ``name`` (a built-in's is its class: subclass it to
    build on it).

    Raises:
      ValueError: no transport ``name`` is registered.

    Example:
      >>> registered_transport("tcp").__name__
      'TcpTransport'
    """
    check_transports([name], "registered_transport")
    return _REGISTRY[name]


def registered_transports() -> list[str]:
    """The names of the registered transports, in the order they were registered.

    Example:
      >>> {"local", "tcp", "grpc"} <= set(registered_transports())
      True
    """
    return list(_REGISTRY)


def default_transports() -> list[str]:
    """The transport list when the options name none: ``local``, ``tcp``, ``grpc``, less
    those turned off (``TENSORPLAY_JAX_RPC_LOCAL=0``, ``TENSORPLAY_JAX_RPC_TCP=0``).

    Example:
      >>> default_transports()[-1]
      'grpc'
    """
    names = []
    if settings.get_str(LOCAL_TRANSPORT_ENV) != "0":
        names.append("local")
    if settings.get_str(TCP_TRANSPORT_ENV) != "0":
        names.append("tcp")
    return [*names, "grpc"]


def check_transports(names: Sequence[str], what: str) -> list[str]:
    """``names`` as a list, checked: registered, no repeats, at least one.

    Raises:
      ValueError: naming the function (``what``), the bad name and the registered ones.

    Example:
      >>> check_transports(("local", "grpc"), "init_rpc")
      ['local', 'grpc']
      >>> try:
      ...     check_transports(["tcp", "nope"], "init_rpc")
      ... except ValueError as e:
      ...     print(str(e).split(";")[0])
      init_rpc: unknown transport 'nope' in transports=['tcp', 'nope']
    """
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in _REGISTRY:
            raise ValueError(
                f"{what}: unknown transport {name!r} in transports={names!r}; registered: "
                f"{', '.join(map(repr, _REGISTRY))} (register_transport adds one)"
            )
    if not names or len(set(names)) != len(names):
        raise ValueError(
            f"{what}: transports={names!r} must name at least one transport, each once"
        )
    return names


def make_transports(names: Sequence[str]) -> list[tuple[str, Transport]]:
    """A new instance of each named transport, in order, with its name (not serving yet).

    Raises:
      ValueError: as :func:`check_transports`.

    Example:
      >>> [(name, type(t).__name__) for name, t in make_transports(["tcp", "grpc"])]
      [('tcp', 'TcpTransport'), ('grpc', 'GrpcTransport')]
    """
    return [(name, _REGISTRY[name]()) for name in check_transports(names, "init_rpc")]
