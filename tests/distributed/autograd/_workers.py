"""Worker code for the distributed autograd tests: each function runs in every rank."""

from __future__ import annotations

import functools
import json
import sys
import time

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests import _worker
from tests._worker import init_rpc, rank_and_world_size
from tests.distributed.autograd import _targets as T

# These workers poll at a finer grain, and give up sooner, than the prelude's default.
wait_until = functools.partial(_worker.wait_until, timeout=10.0, poll=0.02)


def seed() -> None:
    """Issue 4's seed example in one worker, after the errors before ``init_rpc``.

    Reports the errors of ``context()`` and ``backward()`` before ``init_rpc``, whether
    distributed autograd was available / initialized before and after, and ``t``'s gradient.
    """
    before = dict(
        context_error=_worker.error_text(lambda: dist_autograd.context().__enter__()),
        backward_error=_worker.error_text(
            dist_autograd.backward, 1, [tp.ones(1, requires_grad=True).sum()]
        ),
        available=dist_autograd.is_available(),
        initialized_before=dist_autograd.is_initialized(),
    )
    rpc.init_rpc("worker", rank=0, world_size=1)

    def remote_double(t):
        return t * 2

    with dist_autograd.context() as ctx_id:
        t = tp.randn(4, requires_grad=True)
        out = rpc.rpc_sync("worker", remote_double, args=(t,))
        loss = out.sum()
        dist_autograd.backward(ctx_id, [loss])
        grads = dist_autograd.get_gradients(ctx_id)
    rpc.shutdown()
    _worker.report(
        **before, grad=grads[t].tolist(), initialized_after=dist_autograd.is_initialized()
    )


def seed_multi() -> None:
    """The seed example along a chain of workers: w0 -> w1 -> ... -> w{ws-1}.

    Rank 0 reports ``t``'s gradient.
    """
    rank, ws = rank_and_world_size()
    init_rpc("worker")

    def remote_double(t):
        return t * 2

    if rank == 0:
        with dist_autograd.context() as ctx_id:
            t = tp.randn(4, requires_grad=True)
            out = t
            for r in range(1, ws):
                out = rpc.rpc_sync(f"worker{r}", remote_double, args=(out,))
            loss = out.sum()
            dist_autograd.backward(ctx_id, [loss])
            grads = dist_autograd.get_gradients(ctx_id)
            _worker.report(grad=grads[t].tolist())
    rpc.shutdown()


def autograd_ready() -> bool:
    """Whether distributed autograd is available and initialized in this worker."""
    return dist_autograd.is_available() and dist_autograd.is_initialized()


def threads_on_first_three(nthreads: int) -> int | None:
    """On w0-w2: ``T.threads_job`` with the other two as peers (None on the others)."""
    rank = rpc.get_worker_info().id
    if rank >= 3:
        return None
    others = [f"w{(rank + 1) % 3}", f"w{(rank + 2) % 3}", f"w{rank}", f"w{(rank + 1) % 3}"]
    return T.threads_job(rank, nthreads, others)


# A worker dies (SIGKILL-like exit) inside its backward: survivors raise, in time.
def dead() -> None:
    """w2 dies in its backward; w0 records how its backward failed and the gradient a later
    backward through the survivor w1 gives, in the JSON file ``sys.argv[1]``."""
    rank = rank_and_world_size()[0]
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=20)
    init_rpc(rpc_backend_options=opts)
    if rank == 0:
        t = tp.ones(3, requires_grad=True)
        seen: dict[str, object] = {}
        with dist_autograd.context() as cid:
            z = rpc.rpc_sync("w1", T.relay, args=(t, "w2", T.die_in_backward))
            t0 = time.monotonic()
            try:
                dist_autograd.backward(cid, [z.sum()])
                seen["error"] = None
            except Exception as e:
                seen["error"] = f"{type(e).__name__}: {e}"
            seen["took"] = time.monotonic() - t0
            y = rpc.rpc_sync("w1", T.double, args=(t,))  # the survivors still work
            dist_autograd.backward(cid, [y.sum()])
            seen["grad"] = np.asarray(dist_autograd.get_gradients(cid)[t]).tolist()
        with open(sys.argv[1], "w") as f:
            json.dump(seen, f)
    rpc.shutdown()
