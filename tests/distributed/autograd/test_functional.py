"""Functional mode: ``differentiable_rpc`` under ``jax.grad``/``jax.vjp``/``jax.value_and_grad``."""

from __future__ import annotations

from tests.distributed.autograd._scripts import script

FUNCTIONAL = script(
    """
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    if rank == 0:
        drpc = dist_autograd.differentiable_rpc
        x0 = jnp.asarray(np.random.default_rng(0).standard_normal(4).astype(np.float32))

        # a parameter held in an RRef on w1: x's gradient comes back to JAX, the
        # parameter's lands in the context on w1
        rref = rpc.remote("w1", T.make_param, args=(3,))
        w = rref.to_here().value

        def loss(x):
            return jnp.sum(jnp.tanh(drpc("w1", T.use_param, args=(rref, x))) ** 2)

        def oracle(w, x):
            return jnp.sum(jnp.tanh(w * x) ** 2)

        with dist_autograd.context() as cid:
            val, g = jax.value_and_grad(loss)(x0)
            gw, n = rpc.rpc_sync("w1", T.param_grad, args=(cid, rref))
            assert dist_autograd.get_gradients(cid) == {}  # argument wrappers are not leaves
        np.testing.assert_allclose(val, oracle(w, x0), rtol=1e-5)
        np.testing.assert_allclose(g, jax.grad(oracle, 1)(w, x0), rtol=1e-5)
        np.testing.assert_allclose(gw, jax.grad(oracle, 0)(w, x0), rtol=1e-5)
        assert n == 1

        # no context: a private one, released after backward; a lifted pure JAX function;
        # a nested hop w0 -> w1 -> w2 with static (non-array) arguments
        y, vjp = jax.vjp(lambda x: drpc("w1", T.jsin2, args=(x,)), x0)
        np.testing.assert_allclose(y, 2 * jnp.sin(x0), rtol=1e-6)
        (ct,) = vjp(jnp.ones(4))
        np.testing.assert_allclose(ct, 2 * jnp.cos(x0), rtol=1e-6)
        local_chain = lambda x: T.chain(x, ["w2"], True).sum()
        g = jax.grad(lambda x: drpc("w1", T.chain, args=(x, ["w2"], False)).sum())(x0)
        np.testing.assert_allclose(g, jax.grad(local_chain)(x0), rtol=1e-5)
        # two outputs, one unused; kwargs
        g = jax.grad(lambda x: drpc("w2", T.shapes, args=(x.reshape(2, 2), x.reshape(2, 2)),
                                    kwargs={"s": 3.0})[0].sum())(x0)
        g_ref = jax.grad(lambda x: T.shapes(x.reshape(2, 2), x.reshape(2, 2), s=3.0)[0].sum())(x0)
        np.testing.assert_allclose(g, g_ref, rtol=1e-5)
        # under jit: without out_shape a clear TypeError; with it, pure_callback
        expect(TypeError, ["differentiable_rpc", "jax.jit", "out_shape"],
               jax.jit(lambda x: drpc("w1", T.double, args=(x,))), x0)
        spec = jax.ShapeDtypeStruct((4,), jnp.float32)
        jloss = lambda x: jnp.sum(jnp.tanh(drpc("w1", T.chain, args=(x, ["w2"], False),
                                                out_shape=spec)) ** 2)
        ref = lambda x: jnp.sum(jnp.tanh(T.chain(x, ["w2"], True)) ** 2)
        for _ in range(2):  # the second call runs the cached executable
            v, g = jax.jit(jax.value_and_grad(jloss))(x0)
            np.testing.assert_allclose(v, ref(x0), rtol=1e-5)
            np.testing.assert_allclose(g, jax.grad(ref)(x0), rtol=1e-5)
        np.testing.assert_allclose(jax.jit(lambda x: drpc("w1", T.double, args=(x,),
                                                          out_shape=spec))(x0), 2 * x0)
        expect(jax.errors.JaxRuntimeError, ["out_shape declares"], jax.jit(lambda x: drpc(
            "w1", T.double, args=(x,), out_shape=jax.ShapeDtypeStruct((3,), jnp.float32))), x0)
        # every private context got released everywhere
        for w_ in ("w1", "w2"):
            wait_until(lambda: rpc.rpc_sync(w_, T.context_count) == 0, timeout=10)
        del rref
        print("functional ok", flush=True)
    rpc.shutdown()
    """
)


def test_differentiable_rpc(workers):
    out = workers(FUNCTIONAL, 3, timeout=180)
    assert "functional ok" in out[0].stdout, out[0]
