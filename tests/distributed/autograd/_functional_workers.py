"""Worker code and remote functions for the functional-mode tests (``differentiable_rpc``).

w0 drives; w1 serves. Oracles: the same JAX function's ``jax.grad`` in one
process, ``jax.test_util.check_grads`` (finite differences), and a training
loop run in one process.
"""

from __future__ import annotations

import functools
import gc

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.test_util import check_grads

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.autograd import _remote_vjp
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._worker import expect, init_rpc, rank_and_world_size, wait_until
from tests.distributed.autograd import _targets as T


# --------------------------------------------------------------------- remote functions
def f(w, x):
    """The issue's plain JAX function."""
    return jnp.sum((x @ w) ** 2)


def stage(w, h, *, scale):
    """A model stage with a pytree result and a static keyword."""
    y = jnp.tanh(h @ w) * scale
    return {"y": y, "norm": jnp.sum(y * y)}


def only_on_w1(x):
    """Works on w1 only (so the caller cannot evaluate its shape)."""
    if rpc.get_worker_info().name != "w1":
        raise RuntimeError("only_on_w1 runs on w1")
    return x * 2.0


def stats():
    return _remote_vjp.stats()


def param_value(rref):
    return np.asarray(rref.local_value().value)


def _data(seed, *shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree_util.tree_map(
        lambda u, v: np.testing.assert_allclose(u, v, rtol=rtol, atol=atol), a, b
    )


# --------------------------------------------------------------------- mode="jax"
def jax_mode() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        drpc = dist_autograd.differentiable_rpc
        w, x = _data(0, 3, 2), _data(1, 4, 3)
        loss = lambda w, x: drpc("w1", f, args=(w, x))

        # grad, value_and_grad, jit (no out_shape: eval_shape here), vs jax.grad of f
        close(jax.grad(loss, (0, 1))(w, x), jax.grad(f, (0, 1))(w, x))
        before = rpc.rpc_sync("w1", stats)
        step = jax.jit(jax.value_and_grad(loss, (0, 1)))
        for i in range(3):
            v, g = step(w + i, x)
            close(v, f(w + i, x), rtol=1e-5)
            close(g, jax.grad(f, (0, 1))(w + i, x))
        after = rpc.rpc_sync("w1", stats)
        assert after["forwards"] - before["forwards"] == 3, (before, after)
        # one program for f's shapes, the one the eager grad above compiled
        assert after["compiled"] == before["compiled"] == 1, (before, after)
        assert after["pending"] == 0, after  # every pullback used and dropped

        # a pytree result, a static keyword, a second worker's result used twice
        h = _data(2, 5, 3)

        def model(w, h):
            out = drpc("w1", stage, args=(w, h), kwargs={"scale": 2.0})
            return out["norm"] + jnp.sum(jnp.sin(out["y"]))

        def model_ref(w, h):
            out = stage(w, h, scale=2.0)
            return out["norm"] + jnp.sum(jnp.sin(out["y"]))

        for fn in (jax.grad(model, (0, 1)), jax.jit(jax.grad(model, (0, 1)))):
            close(fn(w, h), jax.grad(model_ref, (0, 1))(w, h))

        # check_grads through the call (finite differences), eager and under checkpoint
        x1 = _data(3, 4, 3)
        check_grads(lambda x: loss(w, x), (x1,), order=1, modes=["rev"], atol=2e-2, rtol=2e-2)
        ck = jax.checkpoint(lambda w, x: jnp.sin(loss(w, x)))
        close(jax.grad(ck, (0, 1))(w, x), jax.grad(lambda w, x: jnp.sin(f(w, x)), (0, 1))(w, x))
        close(jax.jit(jax.grad(ck))(w, x), jax.grad(lambda w: jnp.sin(f(w, x)))(w))

        # vmap: one call carries the batch; per-example gradients of an unbatched w
        # (jax.checkpoint above ran some forwards twice: their first pullbacks wait unused)
        pending = rpc.rpc_sync("w1", stats)["pending"]
        xs = _data(4, 6, 4, 3)
        before = rpc.rpc_sync("w1", stats)["forwards"]
        close(jax.vmap(loss, (None, 0))(w, xs), jax.vmap(f, (None, 0))(w, xs))
        assert rpc.rpc_sync("w1", stats)["forwards"] - before == 1
        per_ex = jax.vmap(jax.grad(loss, (0, 1)), (None, 0))
        before = rpc.rpc_sync("w1", stats)["forwards"]
        close(per_ex(w, xs), jax.vmap(jax.grad(f, (0, 1)), (None, 0))(w, xs))
        close(jax.jit(per_ex)(w, xs), jax.vmap(jax.grad(f, (0, 1)), (None, 0))(w, xs))
        assert rpc.rpc_sync("w1", stats)["forwards"] - before == 2  # one per run, not per row
        # nested vmap, both arguments batched
        ws = _data(5, 2, 3, 2)
        nested = jax.vmap(jax.vmap(jax.grad(loss), (None, 0)), (0, None))
        close(nested(ws, xs), jax.vmap(jax.vmap(jax.grad(f), (None, 0)), (0, None))(ws, xs))

        # forward mode: a clear error
        for fwd_mode in (
            lambda: jax.jvp(lambda x: loss(w, x), (x,), (x,)),
            lambda: jax.jacfwd(lambda x: loss(w, x))(x),
        ):
            expect(TypeError, ["forward-mode", "custom_vjp", "jax.grad"], fwd_mode)
        # under vmap, JAX itself refuses forward mode, after the forward ran: its pullback
        # is dropped on the callee
        before_jvp = rpc.rpc_sync("w1", stats)["pending"]
        jvp_of_vmap = jax.vmap(lambda x: loss(w, x))
        expect(TypeError, ["forward-mode", "custom_vjp"], jax.jvp, jvp_of_vmap, (xs,), (xs,))
        assert rpc.rpc_sync("w1", stats)["pending"] == before_jvp

        # out_shape: needed only when the shape cannot be evaluated here
        jit_only = jax.jit(jax.grad(lambda x: jnp.sum(drpc("w1", only_on_w1, args=(x,)))))
        expect(TypeError, ["out_shape", "only_on_w1 runs on w1", "jax.eval_shape"], jit_only, x)
        spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
        jit_ok = jax.jit(
            jax.grad(lambda x: jnp.sum(drpc("w1", only_on_w1, args=(x,), out_shape=spec)))
        )
        close(jit_ok(x), 2 * jnp.ones_like(x))

        # mode mismatches name the mode to use
        expect(TypeError, ["mode='tape'"], drpc, "w1", f, args=(tp.tensor(np.asarray(w)), x))
        rref = rpc.remote("w1", T.make_param, args=(3,))
        expect(
            TypeError,
            ["mode='tape'"],
            jax.grad(lambda v: drpc("w1", T.use_param, args=(rref, v)).sum()),
            jnp.ones(4),
        )
        expect(
            TypeError,
            ["mode='jax'", "f"],
            jax.grad(lambda w: drpc("w1", f, args=(w, x), mode="tape")),
            w,
        )
        expect(ValueError, ["mode='tape'"], drpc, "w1", f, args=(w, x), context_id=1)
        expect(ValueError, ["'jax' or 'tape'"], drpc, "w1", f, args=(w, x), mode="JAX")
        del rref
        gc.collect()  # the errors' tracebacks held closures over rref

        # remote parameters, fully functional: passed as arguments, gradients returned
        tx = optax.sgd(0.05)
        y = _data(6, 4, 2)

        def train(call):
            params = {"w": w, "b": jnp.zeros(2)}
            state = tx.init(params)

            @jax.jit
            def step(params, state):
                def loss(p):
                    h = call("w1", stage, args=(p["w"], x), kwargs={"scale": 1.0})["y"]
                    return jnp.mean((h + p["b"] - y) ** 2)

                v, g = jax.value_and_grad(loss)(params)
                upd, state = tx.update(g, state)
                return optax.apply_updates(params, upd), state, v

            losses = []
            for _ in range(5):
                params, state, v = step(params, state)
                losses.append(float(v))
            return params, losses

        local_call = lambda to, fn, args, kwargs: fn(*args, **kwargs)
        got, got_losses = train(lambda to, fn, args, kwargs: drpc(to, fn, args, kwargs))
        want, want_losses = train(local_call)
        close(got, want)
        np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
        assert got_losses[-1] < got_losses[0], got_losses
        assert rpc.rpc_sync("w1", stats)["pending"] == pending  # no pullback left behind
        print("jax mode ok", flush=True)
    rpc.shutdown()


# --------------------------------------------------------------------- mode="tape" under jit
def tape_jit() -> None:
    """A jitted step trains an RRef-held parameter: context_id= and DistributedOptimizer."""
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        drpc = functools.partial(dist_autograd.differentiable_rpc, mode="tape")
        rref = rpc.remote("w1", T.make_param, args=(3,))
        w = jnp.asarray(rpc.rpc_sync("w1", param_value, args=(rref,)))
        x = _data(7, 4)
        opt = DistributedOptimizer(optax.sgd(0.1), [rref])
        spec = jax.ShapeDtypeStruct((4,), jnp.float32)
        traces = []

        def loss(x, cid):
            traces.append(1)
            y = drpc("w1", T.use_param, args=(rref, x), out_shape=spec, context_id=cid)
            return jnp.sum(jnp.tanh(y) ** 2)

        def oracle(w, x):
            return jnp.sum(jnp.tanh(w * x) ** 2)

        step = jax.jit(jax.value_and_grad(loss))
        for _ in range(3):
            with dist_autograd.context() as cid:
                v, g = step(x, dist_autograd.context_id_array(cid))
                gw, n = rpc.rpc_sync("w1", T.param_grad, args=(cid, rref))
                close(v, oracle(w, x))
                close(g, jax.grad(oracle, 1)(w, x))
                assert n == 1 and gw is not None
                close(gw, jax.grad(oracle, 0)(w, x))
                opt.step(cid)
            w = w - 0.1 * jax.grad(oracle, 0)(w, x)  # the same sgd step, in one process
            close(jnp.asarray(rpc.rpc_sync("w1", param_value, args=(rref,))), w)
        assert len(traces) == 1, traces  # one compiled step serves every context
        # an int context id works eagerly too
        with dist_autograd.context() as cid:
            jax.grad(loss)(x, cid)
            assert rpc.rpc_sync("w1", T.param_grad, args=(cid, rref))[1] == 1
        # vmap of tape code: one call per example (tape code is written per example)
        xs = _data(8, 3, 4)
        per_ex = jax.vmap(jax.grad(lambda x: loss(x, None)))
        close(per_ex(xs), jax.vmap(jax.grad(oracle, 1), (None, 0))(w, xs))
        # forward mode: a clear error, and no context left behind (under vmap too)
        expect(
            TypeError,
            ["forward-mode", "jax.grad"],
            jax.jvp,
            lambda x: drpc("w1", T.double, args=(x,)),
            (x,),
            (x,),
        )
        double = jax.vmap(lambda x: drpc("w1", T.double, args=(x,), out_shape=spec))
        expect(TypeError, ["forward-mode"], jax.jvp, double, (xs,), (xs,))
        wait_until(lambda: rpc.rpc_sync("w1", T.context_count) == 0, timeout=10)
        del rref
        print("tape jit ok", flush=True)
    rpc.shutdown()
