"""Start-up of the default process group: its options, and the JAX runtime with its coordinator.

``init_process_group`` checks its options here (:func:`options`), finds the job
through ``tensorplay_jax.runtime.init_method`` (the parser RPC uses too), and
connects every rank to the job's coordination service (:func:`start_store`): it
listens on the rendezvous port plus ``PG_COORDINATOR_PORT_OFFSET`` (the RPC store
owns the port itself), on loopback only for a loopback host. The ranks then agree
through it whether to start JAX's multi-process runtime (:func:`start_runtime`):
all of them, or none. None does when any rank has run JAX work (``jax.distributed``
can no longer start there) or serves RPC calls (a served call may start JAX at any
moment: ``runtime.serving``); a gloo group then runs on the host engines over the
service alone, and :func:`runtime_needed` says when that cannot do.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import socket
import time
from typing import Any

import jax

from tensorplay_jax.process_group import _kv
from tensorplay_jax.process_group.engine import engines
from tensorplay_jax.runtime import cross_process, serving, settings
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
_AGREE_KEY = "tpj/pg/why_not_runtime"  # + "/<rank>": "" where a rank can start JAX's runtime


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


def timeout_s(fn: str, timeout: Any, *, zero_ok: bool = False) -> float:
    """``timeout`` (seconds or a timedelta; None: the default) in seconds, checked;
    ``zero_ok``: zero is a timeout too (one that has run out when the call starts).

    Example:
      >>> timeout_s("barrier", datetime.timedelta(seconds=2))
      2.0
    """
    if timeout is None:
        return DEFAULT_PG_TIMEOUT_S
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if not isinstance(timeout, int | float) or timeout < 0 or (timeout == 0 and not zero_ok):
        kind = "non-negative" if zero_ok else "positive"
        raise ValueError(
            f"{fn}: timeout={timeout!r} must be a {kind} number of seconds or a timedelta."
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
    return "nccl" if gpu_plugin_installed() else "gloo"


def gpu_plugin_installed() -> bool:
    """Whether a JAX GPU plugin (CUDA or ROCm) is installed: what the nccl backend runs on.

    Example:
      >>> isinstance(gpu_plugin_installed(), bool)
      True
    """
    for plugin in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm7_plugin"):
        try:
            if importlib.util.find_spec(plugin) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


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


def start_runtime(backend: str, host: str, port: int, timeout_s: float) -> None:
    """Make this rank's client of the job's service (:func:`start_store`) JAX's
    multi-process runtime, for a job found at ``host:port``."""
    flags = settings.raw("XLA_FLAGS") or ""
    if "xla_cpu_collective_timeout_seconds" not in flags:
        # Backstop for a peer lost *inside* an XLA program (gloo waits this long).
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_collective_timeout_seconds={int(timeout_s)}"
    if backend == "gloo":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        cross_process.apply()
    local = None
    if backend == "nccl" and local_rank() is not None and assigned_devices() is None:
        local = [local_rank()]  # the launcher did not place this worker (runtime.placement)
    gloo_address = None
    if backend == "gloo":
        try:
            gloo_address = local_address(host, port)
        except ValueError as e:
            raise ValueError(f"init_process_group: {e}") from None
    _kv.start_runtime(local_device_ids=local, gloo_address=gloo_address)


def _why_not_runtime() -> str:
    """Why this process cannot start JAX's multi-process runtime now ("": it can)."""
    if _kv.backends_started():
        return "JAX already ran a computation there"
    if serving.serving():
        return "it serves RPC calls (init_rpc), which may start JAX at any moment"
    return ""


def _agree(rank: int, world_size: int, timeout_s: float) -> dict[int, str]:
    """Each rank's reason not to start JAX's runtime (none: every rank can), through the
    job's store: all ranks start it, or none does."""
    _kv.set(f"{_AGREE_KEY}/{rank}", _why_not_runtime().encode())
    deadline = time.monotonic() + timeout_s
    why = {}
    for r in range(world_size):
        left = max(deadline - time.monotonic(), 0.001)
        try:
            reason = _kv.get(f"{_AGREE_KEY}/{r}", left).decode()
        except _kv.KVTimeout:
            raise TimeoutError(
                f"init_process_group: rank {r} did not say within {timeout_s:.3g}s whether it "
                "can start JAX's runtime (it connected to the job's coordination service, then "
                "stopped or hung)"
            ) from None
        if reason:
            why[r] = reason
    return why


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

    Every rank connects to the job's coordination service (:func:`start_store`) and
    says whether it can start JAX's multi-process runtime (:func:`_agree`). When all
    can (no JAX work in any of them, none serving RPC), all start it
    (:func:`start_runtime`), every rank's device known; otherwise none does, and the
    host engines run on the service alone, a rank knowing only its own device (the
    others are None). A runtime or service already up is joined again.

    Raises:
      RuntimeError: it is up as another rank or world size, the group needs JAX's
        runtime after JAX work (:func:`runtime_needed`), or a process has no device.
    """
    host, port = where
    up = None
    if _kv.is_runtime_initialized():
        up = _kv.runtime_rank_and_size()
    elif _kv.store_only() is not None:
        why = runtime_needed(fn, backend, engine)
        if why:
            raise RuntimeError(why)
        up = _kv.store_only()
    else:
        start_store(host, port, rank, world_size, timeout_s)
        blockers = _agree(rank, world_size, timeout_s)
        if not blockers:
            start_runtime(backend, host, port, timeout_s)
        else:
            why = runtime_needed(fn, backend, engine, blockers)
            if why:
                raise RuntimeError(why)
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


def runtime_needed(
    fn: str, backend: str, engine: str, blockers: dict[int, str] | None = None
) -> str | None:
    """Why a group of ``backend`` / ``engine`` cannot start without JAX's runtime, or None
    if it can; ``blockers``: why each rank that could not start the runtime could not.

    Example:
      >>> why = runtime_needed("init_process_group", "gloo", "xla", {1: "it serves RPC calls"})
      >>> print(why)  # doctest: +ELLIPSIS
      init_process_group: engine='xla' needs JAX's multi-process runtime, ...(rank 1: it serves ...
    """
    if backend == "gloo" and engine != "xla":
        return None
    what = f"backend={backend!r}" if backend != "gloo" else f"engine={engine!r}"
    where = "; ".join(f"rank {r}: {why}" for r, why in sorted((blockers or {}).items()))
    where = where or "the job's first group started without it"
    return (
        f"{fn}: {what} needs JAX's multi-process runtime, which starts only where no rank "
        f"has run JAX work or serves RPC calls yet ({where}); "
        "call init_process_group(...) before any JAX work and before init_rpc "
        "(jax.distributed needs that), or use backend='gloo' with engine='auto', 'shm' or "
        "'tcp', which start at any time."
    )
