"""The plain records of the public API: WorkerInfo, BackendType and GrpcRpcBackendOptions."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from pathlib import Path

from tensorplay_jax.rpc import _codec
from tensorplay_jax.rpc.transports import check_transports
from tensorplay_jax.runtime.settings import (
    DEFAULT_INIT_METHOD,
    DEFAULT_NUM_WORKER_THREADS,
    DEFAULT_RPC_TIMEOUT_S,
    RPC_INIT_TIMEOUT_S,
)

__all__ = ["BackendType", "GrpcRpcBackendOptions", "WorkerInfo"]


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker's name and id (its rank), as returned by ``get_worker_info``.

    Example:
      >>> WorkerInfo("trainer", 0)
      WorkerInfo(name='trainer', id=0)
    """

    name: str
    id: int


_codec.register_type(
    WorkerInfo, lambda w: [w.name, w.id], lambda v: WorkerInfo(v[0], v[1]), name="WorkerInfo"
)


class BackendType(enum.Enum):
    """RPC backends; there is one, gRPC (``TENSORPIPE`` is accepted as an alias for ported code)."""

    GRPC = "GRPC"
    TENSORPIPE = "GRPC"


@dataclasses.dataclass
class GrpcRpcBackendOptions:
    """Options for ``init_rpc`` (the tensorplay defaults where tensorplay has them).

    Attributes:
      rpc_timeout: default timeout in seconds of every RPC (0 = no limit).
      init_method: ``"env://"`` (MASTER_ADDR/MASTER_PORT) or ``"tcp://host:port"``.
      num_worker_threads: threads that run incoming calls.
      listen_addr: the address the server binds. None (the default): loopback for a
        job on one host; for a job that spans hosts, ``TENSORPLAY_JAX_LISTEN_ADDR``,
        else the address of ``TENSORPLAY_JAX_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``,
        else the one that routes to MASTER_ADDR (see ``tensorplay_jax.runtime.address``).
      advertise_addr: address the other workers use to reach this one; by default
        ``listen_addr``, or the address chosen as above when ``listen_addr`` is a
        wildcard (``"0.0.0.0"``, ``"::"``).
      port: server port (0 = any free port).
      secret: the job secret every connection proves before it is read (the
        rendezvous store, gRPC, the same-host socket). By default
        ``TENSORPLAY_JAX_RPC_SECRET`` (the launcher and ``spawn`` set a fresh one
        per job), else the owner-only file ``TENSORPLAY_JAX_RPC_SECRET_FILE``,
        else, for a job whose MASTER_ADDR is loopback, a per-user file created on
        first use. It never travels through the store. Empty is an error.
      insecure: run a job that spans hosts without a secret, with no
        authentication at all (also ``TENSORPLAY_JAX_RPC_INSECURE=1``); warns.
      tls_cert_chain / tls_private_key / tls_root_certs: PEM bytes or file paths;
        set all three to use TLS.
      tls_server_name: the name to verify in the server certificates, when not the address.
      tls_require_client_auth: mutual TLS.
      init_timeout: seconds to wait at rendezvous for every worker.
      transports: the names of the transports to reach peers through, in order of
        preference (see ``tensorplay_jax.rpc.transports``): each peer through the
        first that reaches it, the next if connecting fails. None (the default):
        ``["local", "tcp", "grpc"]``, less ``"local"`` with
        ``TENSORPLAY_JAX_RPC_LOCAL=0`` and ``"tcp"`` with ``TENSORPLAY_JAX_RPC_TCP=0``.
        With TLS on, only those that carry TLS are used (``"grpc"``).

    Example:
      >>> GrpcRpcBackendOptions(rpc_timeout=20).num_worker_threads
      16
      >>> GrpcRpcBackendOptions(transports=["tcp", "grpc"]).transports
      ['tcp', 'grpc']
    """

    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S
    init_method: str = DEFAULT_INIT_METHOD
    num_worker_threads: int = DEFAULT_NUM_WORKER_THREADS
    listen_addr: str | None = None
    advertise_addr: str | None = None
    port: int = 0
    secret: str | None = None
    insecure: bool = False
    tls_cert_chain: bytes | str | Path | None = None
    tls_private_key: bytes | str | Path | None = None
    tls_root_certs: bytes | str | Path | None = None
    tls_server_name: str | None = None
    tls_require_client_auth: bool = False
    init_timeout: float = RPC_INIT_TIMEOUT_S
    transports: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.rpc_timeout < 0:
            raise ValueError(f"GrpcRpcBackendOptions: rpc_timeout={self.rpc_timeout} must be >= 0")
        if self.num_worker_threads < 1:
            raise ValueError(
                f"GrpcRpcBackendOptions: num_worker_threads={self.num_worker_threads} must be >= 1"
            )
        if self.transports is not None:
            self.transports = check_transports(self.transports, "GrpcRpcBackendOptions")
        tls = (self.tls_cert_chain, self.tls_private_key, self.tls_root_certs)
        if any(x is not None for x in tls) and not all(x is not None for x in tls):
            raise ValueError(
                "GrpcRpcBackendOptions: set tls_cert_chain, tls_private_key and tls_root_certs "
                "together"
            )


TensorPipeRpcBackendOptions = GrpcRpcBackendOptions
