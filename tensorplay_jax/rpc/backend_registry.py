"""RPC backends by name, with tensorplay's ``rpc.backend_registry`` API.

A backend is what ``init_rpc(backend=...)`` starts: a function that makes the
backend's options (:func:`construct_rpc_backend_options`) and one that makes
its agent (:func:`init_backend`). :class:`BackendType` has one member per
registered backend. The built-in one is ``GRPC`` (``TENSORPIPE`` names it too,
for ported code): the agent of ``rpc/_agent`` with its transports
(``rpc.transports``). :func:`register_backend` adds one, as tensorplay's does;
``tensorplay_jax.distributed.rpc._testing`` registers ``FAULTY_TENSORPIPE``
(tensorplay's fault-injecting test backend) that way.

A backend's agent handler takes ``(name, rank, world_size, options)`` and
returns an agent that ``init_rpc`` then starts: tensorplay's handler is also
given a store, which here the agent makes itself from ``options.init_method``.

Unlike tensorplay's, ``BackendType`` is one class whose members a registration
adds to: ``rpc.BackendType.X`` and ``backend_registry.BackendType.X`` are the
same object before and after.

Example:
    >>> from tensorplay_jax.rpc import backend_registry
    >>> backend_registry.BackendType.TENSORPIPE is backend_registry.BackendType.GRPC
    True
    >>> opts = backend_registry.construct_rpc_backend_options(
    ...     backend_registry.BackendType.TENSORPIPE, rpc_timeout=20, num_worker_threads=4)
    >>> opts.rpc_timeout, opts.num_worker_threads
    (20, 4)
    >>> backend_registry.backend_registered("GRPC"), backend_registry.backend_registered("MPI")
    (True, False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple

from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, RpcBackendOptions
from tensorplay_jax.runtime.settings import DEFAULT_INIT_METHOD, DEFAULT_RPC_TIMEOUT_S

__all__ = [
    "BackendType",
    "BackendValue",
    "backend_registered",
    "construct_rpc_backend_options",
    "init_backend",
    "register_backend",
]


class BackendValue(NamedTuple):
    """A backend's two handlers (tensorplay's field names)."""

    construct_rpc_backend_options_handler: Callable[..., RpcBackendOptions]
    init_backend_handler: Callable[..., Any]


class _Members(type):
    """``BackendType["NAME"]``, ``"NAME" in BackendType``, ``list(BackendType)``."""

    _members: dict[str, BackendType]

    def __getitem__(cls, name: str) -> BackendType:
        try:
            return cls._members[name]
        except KeyError:
            known = ", ".join(sorted(cls._members))
            raise KeyError(f"BackendType has no backend {name!r} (registered: {known})") from None

    def __iter__(cls) -> Iterator[BackendType]:
        seen: list[BackendType] = []
        for member in cls._members.values():
            if member not in seen:
                seen.append(member)
        return iter(seen)

    def __contains__(cls, item: object) -> bool:
        return item in cls._members or item in cls._members.values()

    def __len__(cls) -> int:
        return len(list(iter(cls)))


class BackendType(metaclass=_Members):
    """The registered RPC backends, one member each: ``BackendType.GRPC`` (also
    ``BackendType.TENSORPIPE``), and any that :func:`register_backend` added.

    Attributes:
      name: the backend's name (``"GRPC"`` for the alias ``TENSORPIPE`` too).
      value: its :class:`BackendValue` (the two handlers).
    """

    _members: ClassVar[dict[str, BackendType]] = {}
    __slots__ = ("name", "value")

    def __init__(self, name: str, value: BackendValue) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"BackendType.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_member, (self.name,))


def _member(name: str) -> BackendType:
    return BackendType[name]


_lock = threading.Lock()


def register_backend(
    backend_name: str,
    construct_rpc_backend_options_handler: Callable[..., RpcBackendOptions],
    init_backend_handler: Callable[..., Any],
) -> BackendType:
    """Add a backend; return its new :class:`BackendType` member.

    Args:
      backend_name: the member's name (``BackendType.<backend_name>``).
      construct_rpc_backend_options_handler: ``(rpc_timeout, init_method, **kwargs)``
        -> the backend's options (see :func:`construct_rpc_backend_options`).
      init_backend_handler: ``(name, rank, world_size, options)`` -> an agent that
        ``init_rpc`` starts (``rpc.internal.Agent`` or one made like it).

    Raises:
      RuntimeError: a backend of that name is registered already (tensorplay's words).
    """
    with _lock:
        if backend_name in BackendType._members:
            raise RuntimeError(f"RPC backend {backend_name}: already registered")
        member = BackendType(
            backend_name, BackendValue(construct_rpc_backend_options_handler, init_backend_handler)
        )
        BackendType._members = {**BackendType._members, backend_name: member}
    setattr(BackendType, backend_name, member)
    return member


def backend_registered(backend_name: str) -> bool:
    """Whether a backend of that name is registered."""
    return backend_name in BackendType._members


def construct_rpc_backend_options(
    backend: BackendType,
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S,
    init_method: str = DEFAULT_INIT_METHOD,
    **kwargs: Any,
) -> RpcBackendOptions:
    """The options of ``backend``, by its handler: ``rpc_timeout``, ``init_method`` and the
    backend's own keyword arguments (for ``GRPC``, every field of ``GrpcRpcBackendOptions``)."""
    return backend.value.construct_rpc_backend_options_handler(rpc_timeout, init_method, **kwargs)


def init_backend(backend: BackendType, *args: Any, **kwargs: Any) -> Any:
    """The agent of ``backend``, by its handler (``init_rpc`` starts it)."""
    return backend.value.init_backend_handler(*args, **kwargs)


def _grpc_options(rpc_timeout: float, init_method: str, **kwargs: Any) -> GrpcRpcBackendOptions:
    return GrpcRpcBackendOptions(rpc_timeout=rpc_timeout, init_method=init_method, **kwargs)


def _grpc_agent(
    name: str, rank: int, world_size: int | None, options: GrpcRpcBackendOptions
) -> Any:
    from tensorplay_jax.rpc._agent import Agent  # the agent imports the whole RPC layer

    return Agent(name, rank, world_size, options)


register_backend("GRPC", _grpc_options, _grpc_agent)
BackendType._members = {**BackendType._members, "TENSORPIPE": BackendType.GRPC}
BackendType.TENSORPIPE = BackendType.GRPC  # type: ignore[attr-defined]
