"""Sharded arrays through distributed autograd and the distributed optimizer, real processes.

This process is ``w0``; it maps its ``cpu:1..4`` to ``w1``'s ``cpu:4..7``
(``cpu:k`` to ``cpu:k+3``) and ``w1`` maps them back. A Tensor sharded over
``w0``'s ``cpu:1..4`` goes to ``w1``, is used there, and its gradient must come
back sharded as it went (same mesh, same ``PartitionSpec``). The expected
gradients are ``jax.grad`` of the same function in this process.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests.distributed.autograd import _sharded_targets as T
from tests.rpc._jobs import rpc_job

MAPS = {
    "w0": {"device_maps": {"w1": {f"cpu:{k}": f"cpu:{k + 3}" for k in range(1, 5)}}},
    "w1": {"device_maps": {"w0": {f"cpu:{k + 3}": f"cpu:{k}" for k in range(1, 5)}}},
}
TOL = dict(rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def job():
    with rpc_job(2, "local", rpc_options=MAPS) as w:
        yield w


SPLIT = P("x")


def sharded(values, spec: P = SPLIT) -> jax.Array:
    mesh = Mesh(np.array(jax.devices("cpu")[1:5]), ("x",))
    return jax.device_put(np.asarray(values, np.float32), NamedSharding(mesh, spec))


VALUES = np.linspace(-2.0, 2.0, 8, dtype=np.float32)


def f(v):
    return jnp.sum(jnp.sin(v) * v)


def test_a_gradient_comes_back_with_the_sharding_its_value_went_with(job):
    x = tp.tensor(sharded(VALUES), requires_grad=True)
    with dist_autograd.context() as cid:
        loss = rpc.rpc_sync("w1", T.stage, args=(x,))
        dist_autograd.backward(cid, [loss])
        g = dist_autograd.get_gradients(cid)[x]
    assert g.value.sharding == x.value.sharding
    np.testing.assert_allclose(np.asarray(g.value), jax.grad(f)(VALUES), **TOL)


def test_summed_contributions_keep_the_sharding(job):
    x = tp.tensor(sharded(VALUES), requires_grad=True)
    with dist_autograd.context() as cid:
        a = rpc.rpc_sync("w1", T.stage, args=(x,))
        b = rpc.rpc_sync("w1", T.stage_out, args=(x,))  # comes back sharded: sum here
        assert b.value.sharding == x.value.sharding
        dist_autograd.backward(cid, [a + b.sum()])
        g = dist_autograd.get_gradients(cid)[x]
    assert g.value.sharding == x.value.sharding
    want = jax.grad(lambda v: f(v) + jnp.sum(v * v))(VALUES)
    np.testing.assert_allclose(np.asarray(g.value), want, **TOL)


def test_a_replicated_value_gets_a_replicated_gradient(job):
    x = tp.tensor(sharded(VALUES, P()), requires_grad=True)
    with dist_autograd.context() as cid:
        loss = rpc.rpc_sync("w1", T.stage_out, args=(x,)).sum()
        dist_autograd.backward(cid, [loss])
        g = dist_autograd.get_gradients(cid)[x]
    assert g.value.sharding == x.value.sharding
    np.testing.assert_allclose(np.asarray(g.value), 2 * VALUES, **TOL)


def test_the_distributed_optimizer_steps_a_sharded_parameter_where_it_is(job):
    x = tp.tensor(sharded(VALUES), requires_grad=True)
    before = x.value.sharding
    opt = DistributedOptimizer(optax.sgd(0.5), [rpc.RRef(x)])
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [rpc.rpc_sync("w1", T.stage, args=(x,))])
        opt.step(cid)
    assert x.value.sharding == before
    np.testing.assert_allclose(np.asarray(x.value), VALUES - 0.5 * jax.grad(f)(VALUES), **TOL)


def test_the_distributed_optimizer_steps_a_remote_sharded_parameter_on_its_owner(job):
    init = np.arange(8, dtype=np.float32)
    p_rref = rpc.rpc_sync("w1", T.make_parameter, args=(init.tolist(),))
    x = tp.tensor(sharded(VALUES), requires_grad=True)
    opt = DistributedOptimizer(optax.sgd(0.25), [p_rref])
    with dist_autograd.context() as cid:
        loss = rpc.rpc_sync("w1", T.weighted, args=(p_rref, x))
        dist_autograd.backward(cid, [loss])
        gx = dist_autograd.get_gradients(cid)[x]
        opt.step(cid)
    assert gx.value.sharding == x.value.sharding
    np.testing.assert_allclose(np.asarray(gx.value), init, **TOL)  # d/dx sum(p x) = p
    values, devices = rpc.rpc_sync("w1", T.parameter_state)
    assert devices == ["cpu:4", "cpu:5", "cpu:6", "cpu:7"]  # stepped where it is sharded
    np.testing.assert_allclose(values, init - 0.25 * VALUES, **TOL)  # d/dp sum(p x) = x


@pytest.mark.parametrize("mode", ["jax", "tape"])
def test_differentiable_rpc_gives_a_gradient_sharded_as_its_argument(job, mode):
    x = sharded(VALUES)
    target = T.jax_stage if mode == "jax" else T.tape_stage
    g = jax.grad(lambda v: dist_autograd.differentiable_rpc("w1", target, (v,), mode=mode))(x)
    assert g.sharding == x.sharding
    np.testing.assert_allclose(np.asarray(g), jax.grad(f)(VALUES), **TOL)


def test_differentiable_rpc_under_jit_takes_sharded_arguments(job):
    x = sharded(VALUES)
    step = jax.jit(jax.grad(lambda v: dist_autograd.differentiable_rpc("w1", T.jax_stage, (v,))))
    g = step(x)
    np.testing.assert_allclose(np.asarray(g), jax.grad(f)(VALUES), **TOL)


def test_a_remote_module_with_sharded_parameters_trains_where_they_are(job):
    module = RemoteModule("w1/cpu", T.sharded_linear)  # built, and sharded, by the owner
    w_rref, b_rref = module.remote_parameters()
    w, b = np.asarray(w_rref.to_here().value), np.asarray(b_rref.to_here().value)
    spec = [w_rref.to_here().value.sharding.spec, b_rref.to_here().value.sharding.spec]
    assert spec == [P(None, "x"), P("x")]  # came back sharded (over cpu:1..4: the inverse map)
    x = VALUES.reshape(1, 8)
    opt = DistributedOptimizer(optax.sgd(0.5), [w_rref, b_rref])
    with dist_autograd.context() as cid:
        y = module(x)
        dist_autograd.backward(cid, [(y * y).sum()])
        opt.step(cid)

    def loss(w, b):
        return jnp.sum((x @ w.T + b) ** 2)

    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    np.testing.assert_allclose(np.asarray(y.detach().value), x @ w.T + b, rtol=1e-5, atol=1e-5)
    w2, b2 = w_rref.to_here().value, b_rref.to_here().value
    assert [w2.sharding.spec, b2.sharding.spec] == spec  # stepped on the owner, still sharded
    np.testing.assert_allclose(np.asarray(w2), w - 0.5 * gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b2), b - 0.5 * gb, rtol=1e-5, atol=1e-5)
