"""The one wrapper around JAX's coordination service (private ``jax._src.distributed``).

Process groups use the coordination service for three things: a key-value store
(rendezvous of shared-memory segments, per-call shape descriptors of the XLA
engine), barriers with a timeout, and the runtime's own state.
:func:`start_runtime` starts that runtime the way ``jax.distributed.initialize``
does, except that the service runs in a process of its own (see ``_coordinator``)
and the client's shutdown is bounded by the group's timeout. Nothing else in the
package touches ``jax._src.distributed``.

Every rank first connects a client of the service (:func:`start_store`); the
store is then up, and the ranks agree through it whether the client becomes JAX's
runtime too (:func:`start_runtime`). It cannot after JAX has started its backends
(``jax.distributed`` can no longer start then); a group on a host engine (``shm``,
``tcp``) needs only the store and the barriers, so it runs on the client alone,
which JAX does not know of (the XLA engine, which needs JAX's own runtime, cannot).

The store has no authentication: anyone who reaches the coordinator port can read,
write and delete any key. So every value written here carries an HMAC-SHA256 of
the key and the value under the job secret (``tensorplay_jax.runtime.secret``), and
:func:`get` refuses, with :class:`ForgedValue`, a value without a valid one; a value
cannot be moved to another key either, since the key is part of what is signed.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hmac
from collections.abc import Sequence
from typing import Any

from jax._src import distributed as _jax_distributed

from tensorplay_jax.process_group._errors import DistStoreError
from tensorplay_jax.runtime import secret as _secret

__all__ = [
    "ForgedValue",
    "KVTimeout",
    "Service",
    "backends_started",
    "barrier",
    "delete",
    "get",
    "is_runtime_initialized",
    "job_secret",
    "missing",
    "runtime_rank_and_size",
    "set",
    "start_runtime",
    "start_store",
    "store_only",
    "use_secret",
]


class KVTimeout(DistStoreError, TimeoutError):
    """A key or barrier of the coordination service did not arrive in time (tensorplay's
    store timeout, ``DistStoreError``)."""


class ForgedValue(RuntimeError):
    """A value in the coordination store is not signed with this job's secret."""


_MAGIC = b"tpj1"  # format tag of a signed value: MAGIC + HMAC(32 bytes) + payload
_MAC_LEN = 32
_SECRET: str | None = None
_COORDINATOR = None  # rank 0: the coordinator's subprocess.Popen (it outlives this process)
_STORE = None  # (client, rank, world size, address) of start_store: the service, no JAX runtime


def _client():
    client = _jax_distributed.global_state.client
    if client is None and _STORE is not None:
        return _STORE[0]
    if client is None:
        raise RuntimeError(
            "the JAX distributed runtime is not running; call "
            "tensorplay_jax.distributed.init_process_group(...) first."
        )
    return client


def is_runtime_initialized() -> bool:
    """Whether the JAX distributed runtime is up in this process."""
    return _jax_distributed.global_state.client is not None


def backends_started() -> bool:
    """Whether JAX has started its backends here (``jax.distributed`` can no longer start)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def store_only() -> tuple[int, int] | None:
    """``(rank, world size)`` of the client :func:`start_store` connected, or None."""
    return None if _STORE is None else (_STORE[1], _STORE[2])


def runtime_rank_and_size() -> tuple[int, int]:
    """This process's id and the number of processes of the JAX runtime."""
    state = _jax_distributed.global_state
    return state.process_id, state.num_processes


@dataclasses.dataclass(frozen=True)
class Service:
    """How this process joins the job's coordination service.

    Attributes:
      address: ``host:port`` every rank connects to.
      bind: where rank 0 starts the service listening.
      rank: this process's id.
      world_size: how many processes join.
      init_timeout_s: how long to wait for every rank to connect.
      heartbeat_s: how long a silent client counts as alive.
      shutdown_timeout_s: how long leaving the service may take.
    """

    address: str
    bind: str
    rank: int
    world_size: int
    init_timeout_s: int
    heartbeat_s: int
    shutdown_timeout_s: int


def _connect(service: Service) -> Any:
    """Rank 0 starts the coordination service (``_coordinator``); every rank connects a
    client to it (waiting at most ``service.init_timeout_s`` for all of them)."""
    from jax._src.lib import _jax

    from tensorplay_jax.process_group import _coordinator

    global _COORDINATOR
    if service.rank == 0:
        _COORDINATOR = _coordinator.start(
            service.bind,
            service.address,
            service.world_size,
            service.heartbeat_s,
            service.init_timeout_s,
        )
    client = _jax.get_distributed_runtime_client(
        service.address,
        service.rank,
        init_timeout=service.init_timeout_s,
        heartbeat_timeout=service.heartbeat_s,
        shutdown_timeout=service.shutdown_timeout_s,
        use_compression=True,
    )
    client.connect()
    return client


def start_runtime(
    *,
    local_device_ids: list[int] | None = None,
    gloo_address: str | None = None,
) -> None:
    """Make the client :func:`start_store` connected JAX's multi-process runtime, as
    ``jax.distributed.initialize`` would (every rank of the job does this, or none).

    With ``gloo_address``, XLA's CPU collectives (gloo) listen on and advertise that
    address (by default gloo takes the host name's, which on a Debian host is
    ``127.0.1.1`` and unreachable from other hosts).

    Raises:
      RuntimeError: no client is connected, or JAX already started its backends in
        this process (another thread ran JAX work since the ranks agreed).
    """
    from jax._src import config, xla_bridge
    from jax._src.lib import _jax

    global _STORE
    if _STORE is None:
        raise RuntimeError("tensorplay_jax.process_group._kv: start_store first")
    client, rank, world_size, address = _STORE
    late = (
        "init_process_group: another thread of this process started JAX (ran a computation) "
        "while the group was starting JAX's multi-process runtime; start the group before "
        "any thread runs JAX work."
    )
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(late)
    if local_device_ids:
        visible = ",".join(str(i) for i in local_device_ids)
        config.update("jax_cuda_visible_devices", visible)
        config.update("jax_rocm_visible_devices", visible)
    if gloo_address is not None:
        gloo = _jax.make_gloo_tcp_collectives(distributed_client=client, hostname=gloo_address)
        try:
            xla_bridge.register_backend_factory(
                "cpu",
                functools.partial(xla_bridge.make_cpu_client, collectives=gloo),
                priority=0,
                fail_quietly=False,
            )
        except RuntimeError as e:  # "Backend cpu already initialized"
            raise RuntimeError(late) from e
    state = _jax_distributed.global_state
    state.coordinator_address = address
    state.process_id = rank
    state.num_processes = world_size
    state.client = client
    _STORE = None  # the client is the runtime's now (JAX shuts it down)
    state.initialize_preemption_sync_manager()


def start_store(service: Service) -> None:
    """Connect to the coordination service for its store and barriers (not JAX's runtime).

    Rank 0 first starts the service in its own process (``_coordinator``); every
    rank then connects to ``service.address``. The client stays up for the life of
    the process (a later group joins it) and leaves the service when the process
    exits, unless :func:`start_runtime` makes it JAX's runtime.

    Raises:
      RuntimeError: the service could not start, or not every rank connected
        within ``init_timeout_s``.
    """
    global _STORE
    _STORE = (_connect(service), service.rank, service.world_size, service.address)
    atexit.register(_leave_store)


def _leave_store() -> None:
    global _STORE
    if _STORE is not None:
        client, _STORE = _STORE[0], None
        with contextlib.suppress(Exception):
            client.shutdown()


def use_secret(secret: str) -> None:
    """Sign and check every value from now on with ``secret`` (the job secret)."""
    global _SECRET
    _SECRET = secret


def job_secret() -> str:
    """The job secret given to :func:`use_secret` (engines authenticate their sockets with it)."""
    if _SECRET is None:
        raise RuntimeError("tensorplay_jax.process_group._kv: no job secret (call use_secret)")
    return _SECRET


def _mac(key: str, payload: bytes) -> bytes:
    if _SECRET is None:
        raise RuntimeError("tensorplay_jax.process_group._kv: no job secret (call use_secret)")
    return _secret.mac(_SECRET, b"tpjax-kv\0" + key.encode() + b"\0", payload)


def _open(fn: str, key: str, raw: bytes) -> bytes:
    """The payload of the signed value ``raw`` stored under ``key``, or ForgedValue."""
    head = len(_MAGIC) + _MAC_LEN
    if raw[: len(_MAGIC)] == _MAGIC and len(raw) >= head:
        payload = raw[head:]
        if hmac.compare_digest(raw[len(_MAGIC) : head], _mac(key, payload)):
            return payload
    raise ForgedValue(
        f"{fn}: refused the value of coordination-store key {key!r}: it is not signed with "
        "this job's secret. Either the ranks were started with different secrets (set the "
        f"same {_secret.SECRET_ENV} or {_secret.SECRET_FILE_ENV} for every rank, or pass "
        "the same secret=), or something other than this job's ranks wrote it: anyone who "
        "can reach the coordinator port (MASTER_PORT + 1) can write to this store."
    )


def set(key: str, value: bytes) -> None:
    """Store ``value`` under ``key`` (overwriting), signed with the job secret."""
    _client().key_value_set_bytes(key, _MAGIC + _mac(key, value) + value, allow_overwrite=True)


def get(key: str, timeout_s: float, fn: str = "init_process_group") -> bytes:
    """Wait up to ``timeout_s`` for ``key``; return its value once its signature checks.

    Args:
      key: the key.
      timeout_s: how long to wait for it to appear.
      fn: the public function asking (named in errors).

    Raises:
      KVTimeout: the key did not appear in time.
      ForgedValue: the value there is not signed with this job's secret.
    """
    try:
        raw = _client().blocking_key_value_get_bytes(key, max(1, int(timeout_s * 1000)))
    except Exception as e:  # the service raises XlaRuntimeError / JaxRuntimeError
        if "DEADLINE_EXCEEDED" in str(e) or "timed out" in str(e).lower():
            raise KVTimeout(f"key {key!r} did not appear within {timeout_s:.3g}s") from e
        raise
    return _open(fn, key, raw)


def missing(keys: Sequence[str]) -> list[str]:
    """Those of ``keys`` that are not set now (a non-blocking probe)."""
    out = []
    for key in keys:
        try:
            _client().key_value_try_get_bytes(key)
        except Exception:
            out.append(key)
    return out


def delete(key: str) -> None:
    """Remove ``key`` (and, as the store does, every key below it as a directory)."""
    with contextlib.suppress(Exception):
        _client().key_value_delete(key)


def barrier(barrier_id: str, timeout_s: float, process_ids: Sequence[int]) -> None:
    """Block until every process in ``process_ids`` reaches ``barrier_id``.

    The ids are always explicit: the coordinator's own process is a task of the
    cluster too, and never arrives at a barrier.

    Raises:
      KVTimeout: a process did not arrive within ``timeout_s``.
    """
    try:
        _client().wait_at_barrier(barrier_id, max(1, int(timeout_s * 1000)), list(process_ids))
    except Exception as e:
        if "DEADLINE_EXCEEDED" in str(e) or "timed out" in str(e).lower():
            raise KVTimeout(f"barrier {barrier_id!r} timed out after {timeout_s:.3g}s") from e
        raise
