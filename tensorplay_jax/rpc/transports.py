"""RPC transports as plug-ins: the registry of transports by name, and the built-in ones.

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

The built-in transports are registered at the bottom of this module, from
:data:`BUILTIN_TRANSPORTS`, the one table that names them, by
:func:`register_transport`, as a plug-in is; nothing else in the package names
a particular transport. ``Site`` and the ``Transport`` protocol live in
``rpc/_transport`` (re-exported here), so that the transports need not import
this module.

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

from collections.abc import Callable, Sequence

from tensorplay_jax.rpc._grpc import GrpcTransport
from tensorplay_jax.rpc._local.server import LocalTransport
from tensorplay_jax.rpc._tcp import TcpTransport
from tensorplay_jax.rpc._transport import Site as Site
from tensorplay_jax.rpc._transport import TlsConfig as TlsConfig
from tensorplay_jax.rpc._transport import Transport as Transport
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import LOCAL_TRANSPORT_ENV, TCP_TRANSPORT_ENV

__all__ = [
    "BUILTIN_TRANSPORTS",
    "Site",
    "TlsConfig",
    "Transport",
    "carrying_tls",
    "check_transports",
    "default_transports",
    "make_transports",
    "register_transport",
    "registered_transport",
    "registered_transports",
]


_REGISTRY: dict[str, Callable[[], Transport]] = {}


def register_transport(name: str, factory: Callable[[], Transport]) -> None:
    """Make ``factory`` (a class, or any function of no arguments) the transport ``name``.

    Raises:
      ValueError: ``name`` is taken.

    Example:
      >>> register_transport("tcp", registered_transport("tcp"))
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
    """The transport list when the options name none: the built-in ones, in the order of
    :data:`BUILTIN_TRANSPORTS` (``local``, ``tcp``, ``grpc``), less those turned off
    (``TENSORPLAY_JAX_RPC_LOCAL=0``, ``TENSORPLAY_JAX_RPC_TCP=0``).

    Example:
      >>> default_transports()[-1]
      'grpc'
    """
    return [
        name for name, _, off in BUILTIN_TRANSPORTS if off is None or settings.get_str(off) != "0"
    ]


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


def carrying_tls() -> list[str]:
    """The registered transports whose factory says they carry TLS (a ``tls`` attribute).

    Example:
      >>> carrying_tls()
      ['grpc']
    """
    return [name for name, factory in _REGISTRY.items() if getattr(factory, "tls", False)]


# ------------------------------------------------------------ the built-in transports

# The one table of the built-in transports, in the order of the default list: each
# name, its factory and the environment variable that turns it off (None: always on).
BUILTIN_TRANSPORTS: tuple[tuple[str, Callable[[], Transport], str | None], ...] = (
    ("local", LocalTransport, LOCAL_TRANSPORT_ENV),  # same host: a Unix socket, shared memory
    ("tcp", TcpTransport, TCP_TRANSPORT_ENV),  # any host: an authenticated TCP connection
    ("grpc", GrpcTransport, None),  # a gRPC stream: carries TLS; the last resort
)

for _name, _factory, _ in BUILTIN_TRANSPORTS:
    register_transport(_name, _factory)
