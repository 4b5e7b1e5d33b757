"""Worker functions of ``test_rref_backward.py``: ``RRef.backward`` against ``jax.grad``."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests._worker import expect, init_rpc, npa, rank_and_world_size

RNG = np.random.default_rng(7)
X0 = RNG.standard_normal(5).astype(np.float32)
P0 = RNG.standard_normal(5).astype(np.float32)

# The parameter the owner (w1) holds: a leaf of its own tape.
_param: list[tp.Tensor] = []


def reset_param() -> None:
    _param[:] = [tp.tensor(P0, requires_grad=True)]


def loss_with_param(x: tp.Tensor) -> tp.Tensor:
    """On w1: sum(tanh(x * p) ** 2), from an ``x`` that arrived (recorded) or a plain one."""
    return (tp.tanh(x * _param[0]) ** 2).sum()


def times_param(x: tp.Tensor) -> tp.Tensor:
    return x * _param[0]


def param_grad_in(context_id: int) -> np.ndarray:
    return np.asarray(dist_autograd.get_gradients(context_id)[_param[0]])


def param_dot_grad() -> np.ndarray | None:
    g = _param[0].grad
    return None if g is None else npa(g)


def vector() -> tp.Tensor:
    return tp.ones(3, requires_grad=True) * 2.0


def slow_loss(delay: float) -> tp.Tensor:
    time.sleep(delay)
    return (tp.ones(2, requires_grad=True) * 2.0).sum()


def _oracle() -> tuple[np.ndarray, np.ndarray]:
    """d/dx and d/dp of sum(tanh(x * p) ** 2), by jax.grad (no tape, no RPC)."""
    f = lambda x, p: jnp.sum(jnp.tanh(x * p) ** 2)
    gx, gp = jax.grad(f, argnums=(0, 1))(jnp.asarray(X0), jnp.asarray(P0))
    return np.asarray(gx), np.asarray(gp)


def _close(a, b, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=what)


def rref_backward() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 1:
        reset_param()
    if rank == 0:
        rpc.rpc_sync("w1", reset_param)
        gx, gp = _oracle()

        # A user RRef, distributed backward: it starts on the owner (w1) and reaches x on w0.
        with dist_autograd.context() as ctx:
            x = tp.tensor(X0, requires_grad=True)
            loss = rpc.remote("w1", loss_with_param, args=(x,))
            loss.backward(ctx)
            _close(dist_autograd.get_gradients(ctx)[x], gx, "user rref: x")
            _close(rpc.rpc_sync("w1", param_grad_in, args=(ctx,)), gp, "user rref: p")
        # retain_graph keeps it for another pass; gradients accumulate in the context
        with dist_autograd.context() as ctx:
            x = tp.tensor(X0, requires_grad=True)
            loss = rpc.remote("w1", loss_with_param, args=(x,))
            loss.backward(ctx, retain_graph=True)
            loss.backward(dist_autograd_ctx_id=ctx, retain_graph=True)
            loss.backward(ctx)
            _close(dist_autograd.get_gradients(ctx)[x], 3 * gx, "retain: x")
            _close(rpc.rpc_sync("w1", param_grad_in, args=(ctx,)), 3 * gp, "retain: p")
            expect(RuntimeError, ["a second time"], loss.backward, ctx)
        print("USER-DIST-OK")

        # An owner RRef (here), distributed backward through a call to w1.
        with dist_autograd.context() as ctx:
            x = tp.tensor(X0, requires_grad=True)
            y = rpc.rpc_sync("w1", times_param, args=(x,))
            mine = rpc.RRef((tp.tanh(y) ** 2).sum())
            mine.backward(ctx)
            _close(dist_autograd.get_gradients(ctx)[x], gx, "owner rref: x")
            _close(rpc.rpc_sync("w1", param_grad_in, args=(ctx,)), gp, "owner rref: p")
            assert x.grad is None  # distributed gradients stay in the context
        print("OWNER-DIST-OK")

        # -1: a local backward on the owner, into .grad: here...
        x = tp.tensor(X0, requires_grad=True)
        p = tp.tensor(P0, requires_grad=True)
        rpc.RRef((tp.tanh(x * p) ** 2).sum()).backward()
        _close(npa(x.grad), gx, "local: x")
        _close(npa(p.grad), gp, "local: p")
        # ...and asked from a user: it runs on the owner, whose leaf gets .grad
        assert rpc.rpc_sync("w1", param_dot_grad) is None
        rpc.remote("w1", loss_with_param, args=(tp.tensor(X0),)).backward()
        _close(rpc.rpc_sync("w1", param_dot_grad), gp, "local on the owner: p")
        print("LOCAL-OK")

        # errors
        with dist_autograd.context() as ctx:
            expect(RuntimeError, ["shape (3,)", "scalar"], rpc.remote("w1", vector).backward, ctx)
            expect(TypeError, ["holds a int"], rpc.remote("w1", max, args=(1, 2)).backward, ctx)
            expect(TypeError, ["must be an int"], rpc.RRef(tp.ones(1)).backward, "1")
            expect(RuntimeError, ["does not require grad"], rpc.RRef(tp.ones(1)).backward, ctx)
        loss = rpc.remote("w1", loss_with_param, args=(tp.tensor(X0),))
        expect(
            RuntimeError, ["Could not find autograd context with id: 12345"], loss.backward, 12345
        )
        slow = rpc.remote("w1", slow_loss, args=(1.0,), timeout=0.2)
        expect(
            rpc.RpcTimeoutError, ["RPC ran for more than 0.2 seconds", "slow_loss"], slow.backward
        )
        print("ERRORS-OK")
    rpc.shutdown()
    print("DONE", rank)
