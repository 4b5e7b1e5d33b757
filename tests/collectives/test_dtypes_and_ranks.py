"""float64 (x64), bfloat16 and float16; 0-d and rank-3 inputs; pytrees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import collectives as C
from tests.collectives import _reference as R
from tests.collectives._cases import CASE_IDS, CASES
from tests.collectives._harness import numeric_jacobian, oracle, spmd
from tests.collectives.test_values_and_gradients import inputs

N = 4
LOW = {"bfloat16": (jnp.bfloat16, 3e-2), "float16": (jnp.float16, 5e-3)}


def _vjp_against_oracle(case, dtype, rtol, n=N, mode="shard_map-jit"):
    shape = (n, *case.in_shape(n))
    x = jnp.asarray(inputs(case, shape, seed=5), dtype)
    x64 = np.asarray(x, np.float64)  # the oracle sees exactly the rounded inputs
    ref = oracle(case.ref(n), mode)
    f = spmd(case.fn(n), mode, n)
    y, vjp = jax.vjp(f, x)
    assert y.dtype == dtype
    y_ref = ref(x64)
    np.testing.assert_allclose(np.asarray(y, np.float64), y_ref, rtol=rtol, atol=rtol)
    ct = jnp.asarray(np.random.default_rng(6).standard_normal(y_ref.shape), dtype)
    (g,) = vjp(ct)
    assert g.dtype == dtype
    want = numeric_jacobian(ref, x64).T @ np.asarray(ct, np.float64).ravel()
    np.testing.assert_allclose(np.asarray(g, np.float64).ravel(), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_float64(case):
    with jax.enable_x64(True):
        _vjp_against_oracle(case, jnp.float64, 1e-8)  # central differences: ~1e-10 error


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", sorted(LOW))
def test_low_precision(case, dtype):
    dt, rtol = LOW[dtype]
    if case.name.endswith("prod") or case.name.endswith("avg"):
        rtol *= 4  # products and means of rounded values round again
    _vjp_against_oracle(case, dt, rtol)


SCALAR_AND_RANK3 = [
    ("all_reduce", lambda x, a: C.all_reduce(x, a), R.all_reduce),
    ("broadcast", lambda x, a: C.broadcast(x, 1, a), lambda xs: R.broadcast(xs, 1)),
    ("reduce-max", lambda x, a: C.reduce(x, 2, a, op="max"), lambda xs: R.reduce(xs, 2, "max")),
    ("gather", lambda x, a: C.gather(x, 3, a), lambda xs: R.gather(xs, 3)),
    ("all_gather", lambda x, a: C.all_gather(x, a), R.all_gather),
]


@pytest.mark.parametrize("per_rank", [(), (2, 3, 2)], ids=["0d", "rank3"])
@pytest.mark.parametrize("name,fn,ref", SCALAR_AND_RANK3, ids=[s[0] for s in SCALAR_AND_RANK3])
def test_array_ranks(name, fn, ref, per_rank):
    x64 = np.random.default_rng(7).standard_normal((N, *per_rank))
    f = spmd(fn, "shard_map-jit", N)
    o = oracle(ref, "shard_map-jit")
    y, vjp = jax.vjp(f, jnp.asarray(x64, jnp.float32))
    np.testing.assert_allclose(np.asarray(y), o(x64), rtol=1e-5, atol=1e-6)
    ct = np.random.default_rng(8).standard_normal(y.shape)
    (g,) = vjp(jnp.asarray(ct, jnp.float32))
    want = numeric_jacobian(o, x64).T @ ct.ravel()
    np.testing.assert_allclose(np.asarray(g).ravel(), want, rtol=1e-4, atol=1e-4)


def test_pytree_inputs():
    def f(tree, a):
        return C.all_reduce(tree, a)

    x = {"w": np.arange(N * 2.0).reshape(N, 2), "b": (np.arange(N * 3.0).reshape(N, 3),)}
    g = jax.jit(
        jax.shard_map(
            lambda t: jax.tree.map(lambda v: v[None], f(jax.tree.map(lambda v: v[0], t), "i")),
            mesh=jax.make_mesh(
                (N,), ("i",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:N]
            ),
            in_specs=jax.sharding.PartitionSpec("i"),
            out_specs=jax.sharding.PartitionSpec("i"),
        )
    )
    y = g(x)
    np.testing.assert_allclose(y["w"], np.tile(x["w"].sum(0), (N, 1)))
    np.testing.assert_allclose(y["b"][0], np.tile(x["b"][0].sum(0), (N, 1)))
