"""The host reduction of the process-group engines (``reduce_op.reduce_into``): its XLA
layer for large float16 / bfloat16 sums and averages gives NumPy's bits.

NumPy's loop (``reduce_into_numpy``) is the reference: it rounds to the half type after
each addition and after the division. The layer must do the same, for every part count
(the order of the additions matters once rounding does), with overflow to infinity,
subnormals and NaN among the values.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax.collectives import reduce_op
from tensorplay_jax.collectives.reduce_op import ReduceOp

SIZE = reduce_op.XLA_HALF_MIN_SIZE + 7


@pytest.fixture
def layer_calls(monkeypatch) -> list[int]:
    """The part counts of the XLA layer's calls during the test."""
    calls: list[int] = []
    layer = reduce_op._half_sum

    def counted(parts, divide_by):
        calls.append(len(parts))
        return layer(parts, divide_by=divide_by)

    monkeypatch.setattr(reduce_op, "_half_sum", counted)
    return calls


def _parts(dtype, count: int) -> list[np.ndarray]:
    rs = np.random.RandomState(count)
    parts = []
    for k in range(count):
        x = rs.standard_normal(SIZE) * 10.0 ** rs.randint(-8, 5, SIZE)
        x[:4] = [60000.0, -60000.0, 6e-8, np.nan]  # overflow in float16, a subnormal, NaN
        parts.append(x.astype(dtype) if k % 2 == 0 else (-x).astype(dtype))
    return parts


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("count", [2, 3, 5])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG])
def test_half_sums_give_numpys_bits(dtype, count, op, layer_calls):
    parts = _parts(dtype, count)
    got, want = np.empty(SIZE, dtype), np.empty(SIZE, dtype)
    reduce_op.reduce_into(got, parts, op, count)
    reduce_op.reduce_into_numpy(want, parts, op, count)
    assert layer_calls == [count]  # the layer ran
    # the same bits, but for the sign of a NaN (IEEE 754 leaves it to the implementation)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


def test_the_layer_runs_for_large_half_sums_and_averages_only(layer_calls):
    small = [np.ones(16, np.float16)] * 2
    reduce_op.reduce_into(np.empty(16, np.float16), small, ReduceOp.SUM, 2)
    big32 = [np.ones(SIZE, np.float32)] * 2
    reduce_op.reduce_into(np.empty(SIZE, np.float32), big32, ReduceOp.SUM, 2)
    big = [np.ones(SIZE, np.float16)] * 3
    reduce_op.reduce_into(np.empty(SIZE, np.float16), big, ReduceOp.MAX, 3)
    assert layer_calls == []
    out = np.empty(SIZE, np.float16)
    reduce_op.reduce_into(out, big, ReduceOp.SUM, 3)
    assert layer_calls == [3]
    assert (out == 3).all()


def test_float16_overflow_is_infinite_as_in_numpy():
    parts = [np.full(SIZE, 60000, np.float16)] * 2
    out = np.empty(SIZE, np.float16)
    reduce_op.reduce_into(out, parts, ReduceOp.SUM, 2)
    assert np.isposinf(out).all()
