"""Functions the RPC error tests call on remote workers (importable: they travel by reference)."""

from __future__ import annotations

from typing import Any

import tensorplay_jax as tp
from tensorplay_jax.distributed import rpc


def call(to: str, fn: Any, *args: Any) -> Any:
    """``rpc_sync(to, fn, args)`` from this worker (to make another worker the caller)."""
    return rpc.rpc_sync(to, fn, args=args)


def raise_value(message: str) -> None:
    raise ValueError(message)


def takes_anything(*args: Any) -> int:
    return len(args)


@rpc.functions.async_execution
def async_returns_an_int() -> int:
    return 3  # not a Future


def scaled_ones(n: int) -> tp.Tensor:
    return tp.ones(n, requires_grad=True) * 2
