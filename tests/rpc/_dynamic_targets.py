"""RPC targets of the dynamic-group tests: they run on the members (``_dynamic_member``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from tensorplay_jax.distributed import rpc

LEAVE = threading.Event()
HELD: list[Any] = []  # RRefs a member keeps (owned elsewhere)


def leave() -> None:
    """Ask this member to leave the group (``rpc.shutdown()``) and exit."""
    LEAVE.set()


def names() -> list[str]:
    """The members this worker sees now."""
    return [w.name for w in rpc.get_worker_infos()]


def square(x: Any) -> Any:
    return np.asarray(x) ** 2


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def hold_remote(owner: str, n: int) -> None:
    """Create a value on ``owner`` by ``remote()`` and keep the RRef (a fork there)."""
    HELD.append(rpc.remote(owner, np.arange, args=(n,)))
    HELD[-1].to_here()


def keep(rref: Any) -> None:
    """Keep ``rref`` (a fork of it, held here)."""
    HELD.append(rref)


def pass_on(to: str) -> None:
    """Give worker ``to`` the last RRef this one keeps (a fork that ``to`` holds)."""
    rpc.rpc_sync(to, keep, args=(HELD[-1],))


def open_context_on(to: str) -> int:
    """Enter a dist-autograd context that reaches ``to`` and never leave it; its id."""
    import tensorplay_jax as tp
    import tensorplay_jax.distributed.autograd as dist_autograd

    ctx = dist_autograd.context()
    HELD.append(ctx)
    ctx_id = ctx.__enter__()
    HELD.append(rpc.rpc_sync(to, tp.mul, args=(tp.ones(2, requires_grad=True), 2.0)))
    return ctx_id
