"""``in_process_rpc`` without a job: its agent serves every import form, in this thread only.

(With a job, names are checked by the real agent: ``test_check_dist_grads``.)
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.rpc import rpc_sync as rpc_sync_imported_before
from tensorplay_jax.testing import in_process_rpc
from tensorplay_jax.testing.inprocess import InProcessAgent


class Scale:
    def __init__(self, w: float) -> None:
        self.w = w

    def forward(self, x: float) -> float:
        return x * self.w


def _is_local(value: object) -> object:
    return value


def test_every_import_form_is_served_here():
    marker = object()
    with in_process_rpc():
        from tensorplay_jax.distributed.rpc import remote
        from tensorplay_jax.rpc import rpc_async, rpc_sync

        assert rpc_sync("w1", _is_local, args=(marker,)) is marker  # the very object
        assert rpc_sync_imported_before("w1", _is_local, args=(marker,)) is marker
        assert rpc.rpc_sync(3, _is_local, args=(marker,)) is marker
        assert rpc_async("w2", _is_local, args=(marker,)).wait() is marker
        assert remote("w2", _is_local, args=(marker,)).to_here() is marker
    assert not rpc.is_initialized()
    with pytest.raises(rpc.RpcNotInitializedError):
        rpc_sync_imported_before("w1", _is_local, args=(1,))


def test_remote_rrefs_and_their_proxies():
    with in_process_rpc():
        rref = rpc.remote("w1", Scale, args=(3.0,))
        assert rref.owner_name() == "w1" and rref.to_here().w == 3.0
        assert rref.rpc_sync().forward(2.0) == 6.0
        assert rref.rpc_async().forward(3.0).wait() == 9.0
        assert rref.remote().forward(4.0).to_here() == 12.0
        # the function an RPC runs sees the RRef as its owner does
        assert rpc.rpc_sync("w1", lambda r: r.local_value().w, args=(rref,)) == 3.0
        assert rpc.rpc_sync("w1", lambda rs: rs[0].is_owner(), args=([rref],))
        failed = rpc.remote("w1", lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):  # surfaces on use, as over RPC
            failed.to_here()


def test_errors_propagate_as_raised():
    with in_process_rpc():
        with pytest.raises(ZeroDivisionError):
            rpc.rpc_sync("w1", lambda: 1 / 0)
        fut = rpc.rpc_async("w1", lambda: {}["k"])
        assert isinstance(fut.exception(), KeyError)
        with pytest.raises(TypeError, match="not callable"):
            rpc.rpc_sync("w1", 3)


def test_other_threads_keep_the_process_agent():
    seen = []
    with in_process_rpc():
        assert rpc.is_initialized()  # this thread: the in-process agent
        t = threading.Thread(target=lambda: seen.append(rpc.is_initialized()))
        t.start()
        t.join()
    assert seen == [False]


def test_one_block_at_a_time():
    with in_process_rpc(), pytest.raises(RuntimeError, match="already active"), in_process_rpc():
        pass
    with in_process_rpc():  # free again
        pass


def test_differentiable_rpc_is_plain_jax_here():
    """JAX differentiates the function itself: forward mode works, unlike over RPC."""

    def stage(w, x):
        return jnp.sin(w * x)

    def loss(w, x):
        return jnp.sum(dist_autograd.differentiable_rpc("w1", stage, args=(w, x)) ** 2)

    w, x = jnp.ones(3), jnp.arange(3.0)
    want = jax.grad(lambda w: jnp.sum(stage(w, x) ** 2))(w)
    with in_process_rpc():
        np.testing.assert_allclose(jax.grad(loss)(w, x), want, rtol=1e-6)
        _, tangent = jax.jvp(lambda w: loss(w, x), (w,), (jnp.ones(3),))
        np.testing.assert_allclose(tangent, jnp.sum(want), rtol=1e-6)

        def tape_loss(x):
            y = dist_autograd.differentiable_rpc("w1", tp.mul, args=(x, 3.0), mode="tape")
            return jnp.sum(y * y)

        np.testing.assert_allclose(jax.grad(tape_loss)(jnp.ones(2)), [18.0, 18.0])
        # the argument rules hold here too
        with pytest.raises(ValueError, match="mode='tape'"):
            dist_autograd.differentiable_rpc("w1", stage, args=(w, x), context_id=1)


def test_the_agent_alone():
    agent = InProcessAgent(None)
    assert agent.resolve(2, "rpc_sync") == rpc.WorkerInfo("2", 2)
    assert agent.me == rpc.WorkerInfo("in_process", 0) and agent.world_size == 1
    with in_process_rpc():
        info = rpc.get_debug_info()
    assert info["num_pending_requests"] == 0 and info["name"] == "in_process"
