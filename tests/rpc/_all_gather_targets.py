"""Functions the all-gather tests run on started workers (imported there by name)."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.distributed import rpc


def gather_rank(names: list[str] | None = None, timeout: float = -1) -> dict[str, Any]:
    """This worker's part of ``rpc.api._all_gather``: its rank, by name, from everyone."""
    return rpc.api._all_gather(rpc.get_worker_info().id, names, timeout=timeout)
