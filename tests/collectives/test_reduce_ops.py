"""The derivative rules of the non-sum ops, checked where they differ from calculus
on generic points: ties for max/min (to the lowest rank) and zeros for prod."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import collectives as C
from tests.collectives._harness import spmd

N = 4


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize(
    "name,fn,in_shape",
    [
        ("all_reduce", lambda op: lambda x, a: C.all_reduce(x, a, op=op), (2,)),
        ("reduce", lambda op: lambda x, a: C.reduce(x, 0, a, op=op), (2,)),
        ("reduce_scatter", lambda op: lambda x, a: C.reduce_scatter(x, a, op=op), (N,)),
    ],
)
@pytest.mark.parametrize("mode", ["shard_map-jit", "pmap", "shard_map-novma-jit"])
def test_ties_go_to_lowest_rank(name, fn, in_shape, op, mode):
    # Every rank holds the same values: a tie everywhere. Ranks 1 and 3 win.
    x = np.zeros((N, *in_shape), np.float32)
    x[1] = x[3] = 5.0 if op == "max" else -5.0
    f = spmd(fn(op), mode, N)
    g = np.asarray(jax.grad(lambda x: f(x).sum())(jnp.asarray(x)))
    assert g[1].sum() > 0
    np.testing.assert_array_equal(g[[0, 2, 3]], 0.0)
    # reverse and forward mode agree
    e = np.zeros_like(x)
    e[1] = 1.0
    _, t = jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(e),))
    assert np.asarray(t).sum() == pytest.approx(g[1].sum())


def test_prod_gradient_with_zeros():
    # d/dx_r prod_j x_j = prod_{j != r} x_j, exact when some x_j are zero.
    x = np.array([[2.0], [0.0], [3.0], [0.5]], np.float32)
    f = spmd(lambda x, a: C.all_reduce(x, a, op="prod"), "shard_map-jit", N)
    g = np.asarray(jax.grad(lambda x: f(x)[0].sum())(jnp.asarray(x)))
    np.testing.assert_allclose(g[:, 0], [0.0, 3.0, 0.0, 0.0])
    x[3] = 0.0  # two zeros: every partial derivative is zero
    g = np.asarray(jax.grad(lambda x: f(x)[0].sum())(jnp.asarray(x)))
    np.testing.assert_allclose(g[:, 0], 0.0)


def test_reduce_op_enum_and_spellings():
    x = np.arange(N, dtype=np.float32)[:, None]
    for op in (C.ReduceOp.MAX, "max", "MAX"):
        f = spmd(lambda x, a, op=op: C.all_reduce(x, a, op=op), "shard_map-jit", N)
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(x)))[:, 0], N - 1)
    assert C.ReduceOp.SUM == "sum"


def test_integer_inputs_forward():
    x = np.arange(N * 2, dtype=np.int32).reshape(N, 2)
    f = spmd(lambda x, a: C.all_reduce(x, a, op="max"), "shard_map-jit", N)
    y = np.asarray(f(jnp.asarray(x)))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.tile(x.max(0), (N, 1)))


@pytest.mark.parametrize(
    "op,np_op", [("band", np.bitwise_and), ("bor", np.bitwise_or), ("bxor", np.bitwise_xor)]
)
@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_bitwise_ops_on_integers_and_bools(op, np_op, dtype):
    x = (np.arange(N * 3).reshape(N, 3) * 5 % 7).astype(dtype)
    want = np_op.reduce(x, axis=0)
    for name, fn in [
        ("all_reduce", lambda x, a: C.all_reduce(x, a, op=op)),
        ("reduce_scatter", lambda x, a: C.reduce_scatter(jnp.stack([x] * N), a, op=op)),
    ]:
        got = np.asarray(spmd(fn, "shard_map-jit", N)(jnp.asarray(x)))
        for r in range(N):
            np.testing.assert_array_equal(got[r], want, err_msg=f"{name} rank {r}")


def test_bitwise_ops_refuse_floats():
    f = spmd(lambda x, a: C.all_reduce(x, a, op="band"), "shard_map-jit", N)
    with pytest.raises(TypeError, match="op='band' needs an integer or bool input"):
        f(jnp.ones((N, 2)))
