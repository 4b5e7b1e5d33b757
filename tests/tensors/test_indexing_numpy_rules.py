"""Indexing's NumPy rules (``tensors._indexing``): JAX's values, dtypes and shapes, no trace.

An unrecorded read or write at basic indices of a small CPU array runs with NumPy
(``autograd.register_numpy_rule``); the oracle is the operation's compiled JAX
program (``_Entry.forward``, ``jax.jit`` of ``x[index]`` / ``x.at[index].set(v)``).
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorplay_jax as tp
from tensorplay_jax.autograd import _cache
from tensorplay_jax.tensors import _indexing
from tests._jax_events import TRACE, events


def _traced(fn) -> int:
    """How many functions JAX traces to a jaxpr while ``fn()`` runs."""
    with events(TRACE) as traces:
        fn()
    return len(traces)


_DTYPES = [np.float32, np.int32, np.bool_, np.uint8, np.int16]


@st.composite
def _basic_index(draw, shape):
    """A basic index of ``shape``: ints (negative too), slices (any step), None, ``...``."""
    items, dim = [], 0
    ellipsis_used = False
    while dim < len(shape) and draw(st.booleans()):
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis"]))
        if kind == "int":
            items.append(draw(st.integers(-shape[dim], shape[dim] - 1)))
            dim += 1
        elif kind == "slice":
            bound = st.none() | st.integers(-shape[dim] - 2, shape[dim] + 2)
            step = st.none() | st.sampled_from([1, 2, 3, -1, -2])
            items.append(slice(draw(bound), draw(bound), draw(step)))
            dim += 1
        elif kind == "none":
            items.append(None)
        elif not ellipsis_used:
            items.append(Ellipsis)
            ellipsis_used = True
            dim = len(shape)  # ``...`` takes the rest here
    return tuple(items)


def _array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 50).astype(dtype)


@st.composite
def _case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(_DTYPES))
    return shape, dtype, draw(_basic_index(shape)), draw(st.integers(0, 2**16))


def _compiled(fn, spec):
    return _cache._Entry("test_indexing_rule", lambda *a: fn(*a, spec=spec)).forward


@settings(max_examples=100, deadline=None)
@given(case=_case())
def test_a_read_by_the_rule_is_jaxs_read(case):
    shape, dtype, index, seed = case
    x = _array(shape, dtype, seed)
    spec, arrays, basic = _indexing.encode_index(index, shape)
    assert basic
    got = _indexing._getitem_numpy(x, *arrays, spec=spec)
    want = np.asarray(_compiled(_indexing._getitem, spec)(x, *arrays))
    assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, x)  # a copy: later writes to x cannot reach it


_VALUES = {
    "python float": lambda shape, dt, rng: 2.75,
    "python int": lambda shape, dt, rng: 3,
    "python bool": lambda shape, dt, rng: True,
    "same dtype": lambda shape, dt, rng: (rng.standard_normal(shape) * 50).astype(dt),
    "float32 array": lambda shape, dt, rng: rng.standard_normal(shape).astype(np.float32),
    "int32 array": lambda shape, dt, rng: rng.integers(-9, 9, shape).astype(np.int32),
    "bool array": lambda shape, dt, rng: rng.standard_normal(shape) > 0,
    "broadcast row": lambda shape, dt, rng: rng.standard_normal(shape[-1:]).astype(np.float32),
    "python int beyond int32": lambda shape, dt, rng: 2**40,
    "int64 array beyond int32": lambda shape, dt, rng: np.full(shape, 2**40 + 3, np.int64),
}


def _left_to_jax(value: str, dtype) -> bool:
    """Whether the rule leaves writing ``value`` into ``dtype`` to JAX (its docstring's
    casts: only float into float, integer or bool into float, bool into anything, a
    Python integer JAX's default integer holds into a float or an integer dtype that
    holds it, and an array of the same dtype; not an integer array JAX narrows)."""
    kind = np.dtype(dtype).kind
    x64 = jax.config.jax_enable_x64  # JAX's default integer: int64 with it, int32 without
    if value == "python int beyond int32":
        return not x64 or kind != "f"
    if value == "int64 array beyond int32":
        return not x64 or (kind != "f" and np.dtype(dtype) != np.int64)
    if value in ("python float", "float32 array", "broadcast row"):
        return kind != "f"
    if value == "python int":
        return kind == "b"
    if value == "int32 array":
        return kind != "f" and np.dtype(dtype) != np.int32
    return False  # the same dtype, a Python bool, a bool array


@settings(max_examples=150, deadline=None)
@given(case=_case(), value=st.sampled_from(sorted(_VALUES)))
def test_a_write_by_the_rule_is_jaxs_write_or_left_to_it(case, value):
    shape, dtype, index, seed = case
    x = _array(shape, dtype, seed)
    spec, arrays, _ = _indexing.encode_index(index, shape)
    target = x[tuple(index)].shape
    v = _VALUES[value](target, dtype, np.random.default_rng(seed + 1))
    before = x.copy()
    got = _indexing._setitem_numpy(x, v, *arrays, spec=spec)
    np.testing.assert_array_equal(x, before)  # the input is never written
    if _left_to_jax(value, dtype):
        assert got is NotImplemented, (value, dtype)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX's own casting warnings
        want = np.asarray(_compiled(_indexing._setitem, spec)(x, v, *arrays))
    assert type(got) is np.ndarray, (value, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_the_rules_leave_to_jax_what_numpy_would_do_otherwise():
    x = np.zeros(4, np.int32)
    spec, arrays, _ = _indexing.encode_index(1, (4,))
    assert _indexing._setitem_numpy(x, 2.5, *arrays, spec=spec) is NotImplemented  # float->int
    assert _indexing._setitem_numpy(x, 2**40, *arrays, spec=spec) is NotImplemented  # range
    assert _indexing._setitem_numpy(x, np.ones(2, np.int32), *arrays, spec=spec) is (
        NotImplemented  # a value of the wrong shape: JAX's error, not NumPy's
    )
    weak = jax.lax.broadcast(jax.numpy.asarray(1.0), (4,))  # NumPy has no weak types
    assert weak.weak_type
    assert _indexing._getitem_numpy(weak, *arrays, spec=spec) is NotImplemented
    adv_spec, adv_arrays, basic = _indexing.encode_index(np.array([0, 2]), (4,))
    assert not basic
    assert _indexing._getitem_numpy(x, *adv_arrays, spec=adv_spec) is NotImplemented


def test_reads_and_writes_at_new_bounds_trace_nothing():
    # the batch RL example's observer: its rewards written element by element into a
    # slice whose bounds are new each time (bounds no other test uses)
    rewards = tp.zeros(300)
    bounds = [(0, 37), (37, 41), (41, 108), (108, 111), (111, 299)]
    got = []

    def episodes():
        for a, b in bounds:
            returns = rewards[a:b]
            for i in range(returns.numel()):
                returns[i] = float(a + i)
            got.append(rewards[a:b].numpy())

    assert _traced(episodes) == 0
    for (a, b), values in zip(bounds, got, strict=True):
        np.testing.assert_array_equal(values, np.arange(a, b, dtype=np.float32))
    np.testing.assert_array_equal(rewards.numpy()[299], 0.0)


def test_without_the_speedup_layer_the_same_writes_give_the_same_values():
    def run():
        r = tp.zeros(50)
        for a, b in [(0, 7), (7, 30), (30, 50)]:
            view = r[a:b]
            acc = 0.0
            for i in range(view.numel() - 1, -1, -1):
                acc = view[i] + 0.5 * acc if i < view.numel() - 1 else view[i] * 0 + i + 1.0
                view[i] = acc
        return r.numpy()

    fast = run()
    tp.autograd.set_deferred(False)
    try:
        reference = run()
    finally:
        tp.autograd.set_deferred(True)
    np.testing.assert_array_equal(fast, reference)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_recorded_write_still_differentiates(requires_grad):
    w = tp.ones(3, requires_grad=True)
    out = tp.zeros(5)
    out[1:4] = w * 2.0 if requires_grad else (w * 2.0).detach()
    assert out.requires_grad is requires_grad
    if requires_grad:
        out.sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), np.full(3, 2.0, np.float32))
