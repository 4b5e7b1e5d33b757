"""The plain records of the public API: WorkerInfo and GrpcRpcBackendOptions."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorplay_jax.rpc import _codec
from tensorplay_jax.rpc._device_maps import merge_map, normalize_devices, normalize_map
from tensorplay_jax.rpc._errors import check_worker_name
from tensorplay_jax.rpc.transports import check_transports
from tensorplay_jax.runtime.settings import (
    DEFAULT_INIT_METHOD,
    DEFAULT_NUM_WORKER_THREADS,
    DEFAULT_RPC_TIMEOUT_S,
    RPC_INIT_TIMEOUT_S,
)

__all__ = ["GrpcRpcBackendOptions", "RpcBackendOptions", "WorkerInfo"]


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker's name and id (its rank), as returned by ``get_worker_info``.

    Raises:
      WorkerNameError: ``name`` is not a valid worker name (see ``init_rpc``).

    Example:
      >>> WorkerInfo("trainer", 0)
      WorkerInfo(name='trainer', id=0)
    """

    name: str
    id: int

    def __post_init__(self) -> None:
        check_worker_name(self.name, "WorkerInfo")


_codec.register_type(
    WorkerInfo, lambda w: [w.name, w.id], lambda v: WorkerInfo(v[0], v[1]), name="WorkerInfo"
)


class RpcBackendOptions:
    """The base class of RPC backend options (tensorplay's), for ``isinstance`` checks.

    :class:`GrpcRpcBackendOptions` (also named ``TensorPipeRpcBackendOptions``)
    is the one that ``init_rpc`` takes.
    """

    __slots__ = ()


@dataclasses.dataclass
class GrpcRpcBackendOptions(RpcBackendOptions):
    """Options for ``init_rpc`` (the tensorplay defaults where tensorplay has them).

    Attributes:
      rpc_timeout: default timeout in seconds of every RPC (0 = no limit).
      init_method: ``"env://"`` (MASTER_ADDR/MASTER_PORT), ``"tcp://host:port"`` or
        ``"file:///path"`` (a file every worker can reach; see
        ``tensorplay_jax.runtime.init_method``).
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
      device_maps: ``{peer: {local device: peer device}}``: a JAX array on a
        mapped device arrives on the peer's device, its reply comes back by the
        inverse map (see :meth:`set_device_map`). Devices are names (``"cuda:1"``,
        ``"gpu:0"``, ``"tpu:0"``, ``"cpu:3"``), ints (accelerator indices),
        ``tp.device`` or ``jax.Device`` objects; they are stored by canonical name.
      devices: the devices this worker's arrays may leave from and arrive on;
        None (the default): the keys of its own maps and of its peers' maps to it.

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
    device_maps: Mapping[str, Mapping[Any, Any]] | None = None
    devices: Sequence[Any] | None = None

    def __post_init__(self) -> None:
        maps, self.device_maps = self.device_maps, {}
        for to, mapping in (maps or {}).items():
            self.set_device_map(to, mapping)
        if self.devices is not None:
            self.set_devices(self.devices)
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

    def set_device_map(self, to: str, device_map: Mapping[Any, Any]) -> None:
        """Add ``{local device: device on to}`` entries to the map for worker ``to``.

        As TensorPipe's: entries add to those there; the map stays one-to-one.
        An array on a mapped device arrives on the mapped device of ``to``, and
        what ``to`` replies from that device comes back to the local one. A JAX
        array on any device but the host's (``cpu:0``) needs an entry.

        Raises:
          ValueError: an entry contradicts one already there, or two devices map to one.

        Example:
          >>> opts = GrpcRpcBackendOptions()
          >>> opts.set_device_map("worker1", {"cpu:1": "cpu:2"})
          >>> opts.device_maps
          {'worker1': {'cpu:1': 'cpu:2'}}
        """
        what = "set_device_map"
        new = normalize_map(to, device_map, what)
        maps = dict(self.device_maps or {})
        maps[to] = merge_map(dict(maps.get(to, {})), new, to, what)
        self.device_maps = maps

    def set_devices(self, devices: Sequence[Any]) -> None:
        """Set the local devices this worker's arrays may leave from and arrive on.

        Example:
          >>> opts = GrpcRpcBackendOptions()
          >>> opts.set_devices(["cpu:1", "gpu:0"])
          >>> opts.devices
          ['cpu:1', 'cuda:0']
        """
        self.devices = normalize_devices(devices, "set_devices")


TensorPipeRpcBackendOptions = GrpcRpcBackendOptions
