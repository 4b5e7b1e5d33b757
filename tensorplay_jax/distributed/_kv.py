"""The one wrapper around JAX's coordination service (private ``jax._src.distributed``).

Process groups use the coordination service that ``jax.distributed.initialize``
starts for three things: a key-value store (rendezvous of shared-memory segments,
per-call shape descriptors of the XLA engine), barriers with a timeout, and the
runtime's own state. Nothing else in the package touches ``jax._src.distributed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from jax._src import distributed as _jax_distributed

__all__ = [
    "KVTimeout",
    "barrier",
    "delete",
    "get",
    "is_runtime_initialized",
    "missing",
    "runtime_rank_and_size",
    "set",
]


class KVTimeout(TimeoutError):
    """A key or barrier of the coordination service did not arrive in time."""


def _client():
    client = _jax_distributed.global_state.client
    if client is None:
        raise RuntimeError(
            "the JAX distributed runtime is not running; call "
            "tensorplay_jax.distributed.init_process_group(...) first."
        )
    return client


def is_runtime_initialized() -> bool:
    """Whether ``jax.distributed.initialize`` has run in this process."""
    return _jax_distributed.global_state.client is not None


def runtime_rank_and_size() -> tuple[int, int]:
    """This process's id and the number of processes of the JAX runtime."""
    state = _jax_distributed.global_state
    return state.process_id, state.num_processes


def set(key: str, value: bytes) -> None:
    """Store ``value`` under ``key`` (overwriting)."""
    _client().key_value_set_bytes(key, value, allow_overwrite=True)


def get(key: str, timeout_s: float) -> bytes:
    """Wait up to ``timeout_s`` for ``key`` and return its value.

    Raises:
      KVTimeout: the key did not appear in time.
    """
    try:
        return _client().blocking_key_value_get_bytes(key, max(1, int(timeout_s * 1000)))
    except Exception as e:  # the service raises XlaRuntimeError / JaxRuntimeError
        if "DEADLINE_EXCEEDED" in str(e) or "timed out" in str(e).lower():
            raise KVTimeout(f"key {key!r} did not appear within {timeout_s:.3g}s") from e
        raise


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


def barrier(barrier_id: str, timeout_s: float, process_ids: Sequence[int] | None) -> None:
    """Block until every process in ``process_ids`` (all if None) reaches ``barrier_id``.

    Raises:
      KVTimeout: a process did not arrive within ``timeout_s``.
    """
    try:
        _client().wait_at_barrier(
            barrier_id,
            max(1, int(timeout_s * 1000)),
            None if process_ids is None else list(process_ids),
        )
    except Exception as e:
        if "DEADLINE_EXCEEDED" in str(e) or "timed out" in str(e).lower():
            raise KVTimeout(f"barrier {barrier_id!r} timed out after {timeout_s:.3g}s") from e
        raise
