"""The job of ``test_faulty_backend.py``: three workers on the fault-injecting backend.

Every worker fails the first ``NUM_FAIL_SENDS`` sends of each bookkeeping message
(RRef fork registrations and releases, autograd context releases) and of each
``remote()`` of a Python function, and delays each ``rpc_sync``/``rpc_async`` of a
builtin operator by ``DELAY_S``.
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.distributed import autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.rpc import _testing
from tests._worker import rank_and_world_size

NUM_FAIL_SENDS = 2
DELAY_S = 1.0
FAULTS: dict[str, Any] = dict(
    messages_to_fail=[
        "RREF_FORK_REQUEST",
        "RREF_USER_DELETE",
        "CLEANUP_AUTOGRAD_CONTEXT_REQ",
        "PYTHON_REMOTE_CALL",
    ],
    messages_to_delay={"SCRIPT_CALL": DELAY_S},
    num_fail_sends=NUM_FAIL_SENDS,
)


def options(**kw: Any) -> _testing.FaultyTensorPipeRpcBackendOptions:
    return _testing.FaultyTensorPipeRpcBackendOptions(**FAULTS, **kw)


def peer() -> None:
    """Ranks 1 and 2: serve on the faulty backend until the graceful shutdown."""
    rank, ws = rank_and_world_size()
    rpc.init_rpc(
        f"w{rank}",
        backend=rpc.BackendType.FAULTY_TENSORPIPE,
        rank=rank,
        world_size=ws,
        rpc_backend_options=options(),
    )
    rpc.shutdown()


def context_alive(context_id: int) -> bool:
    """Whether this worker still holds the distributed autograd context."""
    try:
        dist_autograd._retrieve_context(context_id)
    except RuntimeError:
        return False
    return True


def injected() -> dict[str, int]:
    """This worker's injected faults, ``"failed TYPE"`` / ``"delayed TYPE"`` -> count."""
    return {f"{what} {name}": n for (what, name), n in _testing.injected().items()}


HELD: list[rpc.RRef] = []


def hold(r: rpc.RRef) -> None:
    HELD.append(r)


def held_total() -> float:
    return float(HELD[0].to_here().sum())


def release() -> None:
    import gc

    HELD.clear()
    gc.collect()


def owner_counts() -> tuple[int, int]:
    """This owner's RRef values and the forks of them it knows of."""
    import gc

    gc.collect()
    info = rpc._rref_context_get_debug_info()
    return int(info["num_owner_rrefs"]), int(info["num_forks"])


def ask_context_alive(owner: str, context_id: int) -> bool:
    """Ask ``owner`` whether it holds the context (a call that carries nothing of the
    asking test's own pending releases)."""
    return rpc.rpc_sync(owner, context_alive, args=(context_id,))
