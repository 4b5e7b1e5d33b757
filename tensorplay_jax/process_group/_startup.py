"""Start-up of the default process group: its options, and the JAX runtime with its coordinator.

``init_process_group`` checks its options here (:func:`options`), finds the job
through ``tensorplay_jax.runtime.init_method`` (the parser RPC uses too), and
starts JAX's multi-process runtime (:func:`start_runtime`): the coordination
service listens on the rendezvous port plus ``PG_COORDINATOR_PORT_OFFSET``
(the RPC store owns the port itself), on loopback only for a loopback host.
After JAX work in the process, when ``jax.distributed`` can no longer start, a
gloo group runs on the host engines over the same service without JAX's
runtime (:func:`start_store`); :func:`runtime_needed` says when that cannot do.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import socket
from typing import Any

import jax

from tensorplay_jax.process_group import _kv
from tensorplay_jax.process_group.engine import engines
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.address import local_address, net_namespace, spans_hosts
from tensorplay_jax.runtime.init_method import coordinator_port, local_rank
from tensorplay_jax.runtime.placement import assigned_devices
from tensorplay_jax.runtime.settings import (
    DEFAULT_PG_TIMEOUT_S,
    PG_ENGINE_ENV,
    PG_HEARTBEAT_MAX_S,
    PG_HEARTBEAT_MIN_S,
)

__all__ = [
    "BACKENDS",
    "default_backend",
    "engine_names",
    "host_id",
    "join",
    "options",
    "start_runtime",
    "start_store",
    "timeout_s",
]

BACKENDS = ("gloo", "nccl")


def engine_names() -> tuple[str, ...]:
    """What ``engine=`` accepts: ``"auto"`` and every registered engine.

    Example:
      >>> engine_names()
      ('auto', 'shm', 'tcp', 'xla')
    """
    return ("auto", *engines())


def options(fn: str, backend: Any, engine: Any, timeout: Any) -> tuple[str, str, float]:
    """``(backend, engine, timeout in seconds)`` of ``init_process_group``, checked.

    Raises:
      ValueError: an unknown backend or engine, or a timeout that is not positive.

    Example:
      >>> options("init_process_group", "gloo", "xla", 5)
      ('gloo', 'xla', 5.0)
    """
    backend = default_backend() if backend is None else str(backend).lower()
    if backend not in BACKENDS:
        raise ValueError(f"{fn}: backend={backend!r} is not supported; use one of {BACKENDS}.")
    engine = (engine or settings.raw(PG_ENGINE_ENV) or "auto").lower()
    if engine not in engine_names():
        raise ValueError(f"{fn}: engine={engine!r} is not one of {engine_names()}.")
    return backend, engine, timeout_s(fn, timeout)


def timeout_s(fn: str, timeout: Any) -> float:
    """``timeout`` (seconds or a timedelta; None: the default) in seconds, checked.

    Example:
      >>> timeout_s("barrier", datetime.timedelta(seconds=2))
      2.0
    """
    if timeout is None:
        return DEFAULT_PG_TIMEOUT_S
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(
            f"{fn}: timeout={timeout!r} must be a positive number of seconds or a timedelta."
        )
    return float(timeout)


def default_backend() -> str:
    """nccl when a JAX GPU plugin is installed and JAX_PLATFORMS allows GPUs, else gloo.

    Example:
      >>> default_backend() in BACKENDS
      True
    """
    platforms = (settings.raw("JAX_PLATFORMS") or "").strip().lower()
    if platforms and not ({"cuda", "gpu", "rocm"} & set(platforms.split(","))):
        return "gloo"
    for plugin in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm7_plugin"):
        try:
            if importlib.util.find_spec(plugin) is not None:
                return "nccl"
        except (ImportError, ValueError):
            continue
    return "gloo"


def host_id() -> str:
    """This host's name and boot id: equal ids mean the same machine (and shared memory).

    Example:
      >>> host_id().startswith(socket.gethostname())
      True
    """
    boot = ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        pass
    return f"{socket.gethostname()}/{boot}/{net_namespace()}"


def _hostport(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_address(host: str, port: int) -> str:
    """Where the coordinator listens: loopback only for a same-host job, else everywhere.

    ``JAX_COORDINATOR_BIND_ADDRESS`` overrides it, as it does for ``jax.distributed``.
    """
    given = settings.raw("JAX_COORDINATOR_BIND_ADDRESS")
    if given:
        return given
    if not spans_hosts(host):
        return _hostport(host, port)
    return f"[::]:{port}"


def start_runtime(
    backend: str, host: str, port: int, rank: int, world_size: int, timeout_s: float
) -> None:
    """Start (rank 0: and serve) JAX's multi-process runtime for a job found at ``host:port``."""
    flags = settings.raw("XLA_FLAGS") or ""
    if "xla_cpu_collective_timeout_seconds" not in flags:
        # Backstop for a peer lost *inside* an XLA program (gloo waits this long).
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_collective_timeout_seconds={int(timeout_s)}"
    if backend == "gloo":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    local = None
    if backend == "nccl" and local_rank() is not None and assigned_devices() is None:
        local = [local_rank()]  # the launcher did not place this worker (runtime.placement)
    gloo_address = None
    if backend == "gloo":
        try:
            gloo_address = local_address(host, port)
        except ValueError as e:
            raise ValueError(f"init_process_group: {e}") from None
    _kv.start_runtime(
        _service(host, port, rank, world_size, timeout_s),
        local_device_ids=local,
        gloo_address=gloo_address,
    )


def join(
    fn: str,
    backend: str,
    engine: str,
    where: tuple[str, int],
    rank: int,
    world_size: int,
    timeout_s: float,
) -> list[Any]:
    """Start or join what the job's groups run on; one device per rank, in rank order.

    Before any JAX work: JAX's multi-process runtime (:func:`start_runtime`), every
    rank's device known. After it (``jax.distributed`` cannot start then): the
    coordination service alone (:func:`start_store`), for the host engines; a rank
    knows only its own device (the others are None). A runtime or service already
    up is joined again.

    Raises:
      RuntimeError: it is up as another rank or world size, the group needs JAX's
        runtime after JAX work (:func:`runtime_needed`), or a process has no device.
    """
    host, port = where
    up = None
    if _kv.is_runtime_initialized():
        up = _kv.runtime_rank_and_size()
    elif _kv.store_only() is None and not _kv.backends_started():
        start_runtime(backend, host, port, rank, world_size, timeout_s)
    else:
        why = runtime_needed(fn, backend, engine)
        if why:
            raise RuntimeError(why)
        up = _kv.store_only()
        if up is None:
            start_store(host, port, rank, world_size, timeout_s)
    if up is not None and up != (rank, world_size):
        raise RuntimeError(
            f"{fn}: the JAX runtime is already up as process {up[0]} of {up[1]}, "
            f"not rank {rank} of {world_size}."
        )
    if not _kv.is_runtime_initialized():
        return [jax.devices("cpu")[0] if p == rank else None for p in range(world_size)]
    platform = "cpu" if backend == "gloo" else None
    all_devs = jax.devices(platform) if platform else jax.devices()
    devices = []
    for p in range(world_size):
        mine = sorted((d for d in all_devs if d.process_index == p), key=lambda d: d.id)
        if not mine:
            raise RuntimeError(f"{fn}: process {p} has no {platform or 'default'} device.")
        devices.append(mine[0])
    return devices


def _service(host: str, port: int, rank: int, world_size: int, timeout_s: float) -> _kv.Service:
    """How ``rank`` joins the coordination service of a job at ``host:port``."""
    wait_s = max(1, int(timeout_s))
    return _kv.Service(
        address=_hostport(host, coordinator_port(port)),
        bind=_bind_address(host, coordinator_port(port)),
        rank=rank,
        world_size=world_size,
        init_timeout_s=wait_s,
        heartbeat_s=min(max(wait_s, PG_HEARTBEAT_MIN_S), PG_HEARTBEAT_MAX_S),
        shutdown_timeout_s=wait_s,
    )


def start_store(host: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
    """Join (rank 0: and serve) the coordination service of a job at ``host:port``, for
    its store and barriers only: JAX's runtime stays as it is (``_kv.start_store``)."""
    _kv.start_store(_service(host, port, rank, world_size, timeout_s))


def runtime_needed(fn: str, backend: str, engine: str) -> str | None:
    """Why a group of ``backend`` / ``engine`` cannot start after JAX work, or None if it can.

    Example:
      >>> print(runtime_needed("init_process_group", "gloo", "xla"))  # doctest: +ELLIPSIS
      init_process_group: engine='xla' needs JAX's multi-process runtime, ...
    """
    if backend == "gloo" and engine != "xla":
        return None
    what = f"backend={backend!r}" if backend != "gloo" else f"engine={engine!r}"
    return (
        f"{fn}: {what} needs JAX's multi-process runtime, and JAX already ran a computation "
        "in this process; call init_process_group(...) before any JAX work "
        "(jax.distributed needs that), or use backend='gloo' with engine='auto', 'shm' or "
        "'tcp', which start at any time."
    )
