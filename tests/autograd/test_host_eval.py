"""Unrecorded operations on small CPU arrays run with NumPy (``autograd.speedups._host_eval``):
no XLA program per input shape, the values of the compiled program, its dtypes and errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import _cache
from tensorplay_jax.autograd.speedups import _host_eval
from tensorplay_jax.autograd.speedups._state import STATE
from tests._jax_events import COMPILE, events
from tests._procs import REPO_ROOT, reported


def _xla_compiles(fn) -> int:
    """How many XLA compilations ``fn()`` starts in this process."""
    with events(COMPILE) as compiles:
        fn()
    return len(compiles)


def test_normalising_returns_of_new_lengths_compiles_nothing():
    # an RL episode's returns: a new length each episode (lengths no other test uses)
    got = {}

    def episodes():
        for n in range(211, 231):
            r = tp.tensor(np.linspace(0.0, 1.0, n, dtype=np.float32) ** 2)
            got[n] = ((r - r.mean()) / (r.std() + 1e-7)).numpy()

    assert _xla_compiles(episodes) == 0
    for n, values in got.items():
        x = np.linspace(0.0, 1.0, n, dtype=np.float32) ** 2
        want = (x - x.mean()) / (x.std(ddof=1) + np.float32(1e-7))
        assert values.dtype == np.float32 and values.shape == (n,)
        np.testing.assert_allclose(values, want, rtol=2e-6, atol=1e-6)


_CASES = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("max", lambda a, b: tp.maximum(a, b)),
    ("compare", lambda a, b: a < b),
    ("where", lambda a, b: tp.where(a > 0, a, b)),
    ("sum", lambda a, b: a.sum(dim=0)),
    ("amax", lambda a, b: a.amax(dim=1)),
    ("argmax", lambda a, b: a.argmax(dim=1)),
    ("abs-sqrt", lambda a, b: a.abs().sqrt()),
    ("square", lambda a, b: a**2),
    ("cube", lambda a, b: a**3),
    ("reshape-t", lambda a, b: a.reshape(5, 3).t()),
    ("cat", lambda a, b: tp.cat([a, b], dim=0)),
    ("slice", lambda a, b: a[1:, ::2]),
    ("int-sum", lambda a, b: (a > 0).int().sum()),
    ("to-int-from-bool", lambda a, b: (a > b).long()),
    ("all-any", lambda a, b: tp.stack([(a > -9).all(), (a > 9).any()])),
    ("get-int", lambda a, b: a[2]),
    ("get-int-slice", lambda a, b: a[1, 1:4]),
    ("set-int", lambda a, b: _written(a, 1, b[0])),
    ("set-int-scalar", lambda a, b: _written(a, (2, 3), 7.5)),
    ("set-slice", lambda a, b: _written(a, (slice(None), slice(1, 4)), b[:, :3])),
    ("set-strided", lambda a, b: _written(a, (slice(None), slice(None, None, 2)), b[:, 2])),
    ("set-through-view", lambda a, b: _written_through_view(a, b)),
]


def _written(a, index, value):
    out = a.clone()
    out[index] = value
    return out


def _written_through_view(a, b):
    out = a.clone()
    view = out[1:3, 2:]
    view[0] = b[0, :3]
    view[1, 2] = -1.0
    return out


@pytest.mark.parametrize("name, op", _CASES, ids=[c[0] for c in _CASES])
def test_values_and_dtypes_match_the_compiled_program(name, op):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    got = op(tp.tensor(a), tp.tensor(b))
    old = STATE.host_limit
    STATE.host_limit = 0  # the compiled program (XLA), as without this module
    try:
        want = op(tp.tensor(a), tp.tensor(b))
    finally:
        STATE.host_limit = old
    assert got.dtype == want.dtype and got.shape == want.shape, name
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-7, atol=0, err_msg=name)


def test_returns_written_through_a_view_of_new_bounds_compile_nothing():
    # PyTorch's batch RL example (examples/tutorials/rpc_batch_rl.py): an episode's
    # rewards are a slice of a buffer, turned into returns element by element. The
    # operations on scalars recur every step, so they take their compiled programs in
    # the first episode; each later episode's slice has bounds and a length no other
    # has (none another test uses), and compiles nothing.
    first, bounds = (0, 3 + _host_eval.COMPILE_AFTER), [(103, 141), (141, 144), (144, 201)]
    rewards = tp.zeros(237)
    for step in range(230):
        rewards[step] = 1.0 + step % 3

    def episode(a, b):
        returns = rewards[a:b]
        r = 0
        for i in range(returns.numel() - 1, -1, -1):
            r = returns[i] + 0.5 * r
            returns[i] = r

    episode(*first)
    assert _xla_compiles(lambda: [episode(a, b) for a, b in bounds]) == 0
    want = np.zeros(237, np.float32)
    want[:230] = 1.0 + np.arange(230) % 3
    for a, b in [first, *bounds]:  # by hand, in float32 as the Tensors compute it
        r = np.float32(0.0)
        for i in range(b - 1, a - 1, -1):
            r = want[i] + np.float32(0.5) * r
            want[i] = r
    np.testing.assert_array_equal(rewards.numpy(), want)


def test_a_write_out_of_bounds_runs_the_compiled_program():
    # XLA drops (mode="drop") or clamps (mode="clip") a window out of bounds: NumPy
    # would raise or wrap, so such a write is the compiled program's
    x = np.arange(5, dtype=np.float32)
    for mode in ("drop", "clip"):
        entry = _cache._Entry(f"test_oob_{mode}", lambda a, i, m=mode: a.at[i].set(-1.0, mode=m))
        want = np.asarray(jax.jit(lambda a, i, m=mode: a.at[i].set(-1.0, mode=m))(x, 7))
        got = _host_eval.run(entry, [x, 7])
        if mode == "drop":
            assert got is NotImplemented  # out of bounds: the compiled program's answer
        else:
            np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(np.asarray(entry.forward(x, 7)), want)


def test_integer_arithmetic_wraps_as_the_compiled_program_does():
    big = np.array([2**31 - 1, -(2**31)], np.int32)
    got = (tp.tensor(big) + tp.tensor(np.array([1, -1], np.int32))).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.array([-(2**31), 2**31 - 1], np.int32))


def test_a_bad_shape_raises_the_error_jit_raises():
    with pytest.raises(TypeError, match="add got incompatible shapes for broadcasting"):
        tp.ones(3) + tp.ones(4)


def test_what_numpy_cannot_match_runs_the_compiled_program():
    # exp (NumPy's differs from XLA's in the last bit), a large input, a committed one
    x = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
    for make in (
        lambda: tp.tensor(x).exp(),
        lambda: tp.ones(_host_eval._max_values() + 1) * 2.0,
        lambda: tp.Tensor(jax.device_put(x, jax.devices()[0])) * 2.0,
    ):
        assert _xla_compiles(make) >= 1
    np.testing.assert_array_equal(tp.tensor(x).exp().numpy(), np.asarray(jax.jit(jnp.exp)(x)))


def test_a_recurring_shape_takes_its_compiled_program_after_a_while():
    entry = _cache._Entry("test_recurring", lambda a: a * 3.0 - 1.0)
    x = np.arange(11, dtype=np.float32)
    runs = [lambda: _host_eval.run(entry, [x]) for _ in range(_host_eval.COMPILE_AFTER)]
    assert _xla_compiles(lambda: [r() for r in runs]) == 0
    assert _host_eval.run(entry, [x]) is NotImplemented  # from now on: the compiled program
    np.testing.assert_array_equal(np.asarray(entry.forward(x)), x * 3.0 - 1.0)


def test_the_setting_zero_turns_it_off():
    code = textwrap.dedent(
        """
        import jax, numpy as np, tensorplay_jax as tp
        from tests._worker import report
        n = []
        jax.monitoring.register_event_duration_secs_listener(
            lambda name, s, **k: n.append(1)
            if name == "/jax/core/compile/backend_compile_duration" else None)
        r = tp.tensor(np.arange(9, dtype=np.float32))
        before = len(n)
        (r - r.mean()).numpy()
        report(compiles=len(n) - before)
        """
    )
    env = dict(
        os.environ,
        TENSORPLAY_JAX_HOST_EAGER_MAX="0",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO_ROOT),
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert reported(out)["compiles"] == 2, out  # the host evaluator off: both operations compile


def test_a_process_whose_first_operation_is_inside_a_users_jit_keeps_both_paths():
    # The evaluator learns JAX's concrete array type at its first use; inside a trace it
    # must not take the tracer's type (every traced operation then failed, and no eager
    # one ran here).
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np, tensorplay_jax as tp
        from tests._worker import report
        traced = jax.jit(lambda v: (tp.Tensor(v) * 2).sum().value)(jnp.arange(3.0))
        again = jax.jit(lambda v: (tp.Tensor(v) - 1).sum().value)(jnp.arange(4.0))
        n = []
        jax.monitoring.register_event_duration_secs_listener(
            lambda name, s, **k: n.append(1)
            if name == "/jax/core/compile/backend_compile_duration" else None)
        r = tp.tensor(np.arange(9, dtype=np.float32))
        eager = (r - r.mean()).numpy().tolist()
        report(traced=float(traced), again=float(again), eager=eager, compiles=len(n))
        """
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT))
    env.pop("TENSORPLAY_JAX_HOST_EAGER_MAX", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = reported(out)
    assert (got["traced"], got["again"]) == (6.0, 2.0)
    assert got["eager"] == [float(v) for v in range(-4, 5)]
    assert got["compiles"] == 0, out  # the eager operations ran on the host, as in any process


def _episode(w, states, rewards):
    """An RL agent's loss: sum over steps of reward * (w . state), through ``cat``."""
    terms = [
        (w * tp.tensor(s)).sum().reshape(1) * float(r) for s, r in zip(states, rewards, strict=True)
    ]
    loss = tp.cat(terms).sum()
    w.grad = None
    loss.backward()
    return w.grad.numpy()


def test_an_episode_of_a_new_length_compiles_nothing_forward_or_backward():
    rng = np.random.default_rng(5)
    w = tp.tensor(np.full(3, 0.5, np.float32), requires_grad=True)

    def play(n):
        states = rng.standard_normal((n, 3)).astype(np.float32)
        rewards = rng.standard_normal(n).astype(np.float32)
        return _episode(w, states, rewards), (rewards[:, None] * states).sum(axis=0)

    for n in range(17, 29):  # the steps' own operations, of fixed shapes, compile here
        play(n)  # (after running here COMPILE_AFTER times), as do their recurring segments
    results = []
    assert _xla_compiles(lambda: results.extend(play(n) for n in range(29, 41))) == 0
    for got, want in results:  # d/dw sum_i r_i (w . s_i) = sum_i r_i s_i, by hand
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_recorded_operation_numpy_cannot_match_still_differentiates():
    x = tp.tensor(np.linspace(0.5, 2.0, 13, dtype=np.float32), requires_grad=True)
    (x.log() * tp.tensor(np.arange(13, dtype=np.float32))).sum().backward()
    np.testing.assert_allclose(
        x.grad.numpy(), np.arange(13, dtype=np.float32) / x.numpy(), rtol=1e-6
    )


def test_a_pullback_left_to_its_compiled_program_goes_there_without_being_keyed(monkeypatch):
    # log's pullback (a size no other test uses) runs here until it recurs COMPILE_AFTER
    # times; from then on its structure goes to the compiled program without being keyed
    x = np.linspace(0.5, 2.0, 19, dtype=np.float32)
    loss = tp.tensor(x, requires_grad=True).log().sum()
    loss.item()  # runs the pending forward: the nodes get their pullbacks
    node = loss.grad_fn.next_functions[0][0]
    ct = (np.ones(19, np.float32),)
    for _ in range(_host_eval.COMPILE_AFTER):
        got = _host_eval.run_pullback(node.vjp, ct, node.out_info)
        np.testing.assert_allclose(np.asarray(got[0]), 1.0 / x, rtol=1e-6)  # d/dx log x
    assert _host_eval.run_pullback(node.vjp, ct, node.out_info) is NotImplemented

    def no_key(*args):
        raise AssertionError("a pullback left to its compiled program was keyed again")

    monkeypatch.setattr(_host_eval, "_key", no_key)
    assert _host_eval.run_pullback(node.vjp, ct, node.out_info) is NotImplemented
    got = _cache.apply_vjp(node.vjp, ct, node.out_info)  # the compiled program
    np.testing.assert_allclose(np.asarray(got[0]), 1.0 / x, rtol=1e-6)


def test_a_recorded_boolean_mask_index_warns_nothing_and_differentiates():
    # the mask becomes int64 host indices; JAX takes them as int32 without x64, and jax
    # 0.12 warns of a shape struct asking for int64 there
    x = tp.tensor(np.arange(6, dtype=np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x[x > 2.0] * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0, 3, 3, 3])


def test_slice_and_concatenate_gradients_run_here():
    # sizes no other test uses (a shape met COMPILE_AFTER times takes its compiled program)
    a = tp.tensor(np.arange(23, dtype=np.float32), requires_grad=True)
    b = tp.tensor(np.arange(17, dtype=np.float32), requires_grad=True)
    out = tp.cat([a[1:12] * 2.0, b * 3.0]).sum()
    assert _xla_compiles(out.backward) == 0
    np.testing.assert_array_equal(a.grad.numpy(), [0] + [2] * 11 + [0] * 11)
    np.testing.assert_array_equal(b.grad.numpy(), [3] * 17)


def test_gradient_sums_of_small_tensors_compile_nothing():
    from tensorplay_jax.autograd import add_gradients

    a = np.linspace(0.0, 1.0, 37, dtype=np.float32)  # a size no other test sums
    on_device = jax.device_put(a)
    got = []
    assert _xla_compiles(lambda: got.append(add_gradients(on_device, a * 2.0))) == 0
    np.testing.assert_array_equal(np.asarray(got[0]), a + a * 2.0)


def _many_paths_grad(weights: np.ndarray, coefs: np.ndarray) -> np.ndarray:
    """d/dw of sum_i sum(w * c_i), with w used once per row of ``coefs`` (one path each)."""
    w = tp.tensor(weights, requires_grad=True)
    total = None
    for c in coefs:
        term = (w * tp.tensor(c)).sum()
        total = term if total is None else total + term
    total.backward()
    return w.grad.numpy()


def test_a_leaf_reached_by_many_paths_gets_the_reference_paths_sum_bit_for_bit():
    rng = np.random.default_rng(11)
    weights = rng.standard_normal(29).astype(np.float32)  # a size no other test sums
    coefs = rng.standard_normal((300, 29)).astype(np.float32)
    fast = _many_paths_grad(weights, coefs)
    old = tp.autograd.set_deferred(False)  # the reference path: each sum a compiled add
    try:
        reference = _many_paths_grad(weights, coefs)
    finally:
        tp.autograd.set_deferred(old)
    np.testing.assert_array_equal(fast, reference)
    np.testing.assert_allclose(fast, coefs.sum(axis=0, dtype=np.float64), rtol=1e-4, atol=1e-4)


def test_a_running_sum_on_the_host_never_writes_an_array_it_did_not_make():
    theirs = np.arange(5, dtype=np.float32)  # e.g. a gradient that arrived over RPC
    total = _host_eval.sum_into(theirs, np.ones(5, np.float32))
    assert isinstance(total, _host_eval.HostSum)
    np.testing.assert_array_equal(theirs, np.arange(5, dtype=np.float32))
    again = _host_eval.sum_into(total, theirs)
    assert again is total  # its own sum is added into in place
    np.testing.assert_array_equal(again, 2 * np.arange(5, dtype=np.float32) + 1)
    np.testing.assert_array_equal(theirs, np.arange(5, dtype=np.float32))


@pytest.mark.parametrize(
    "held, grad",
    [
        (np.ones(3, np.float32), np.ones(3, np.float64)),  # dtypes differ
        (np.ones(3, np.float32), np.ones((1, 3), np.float32)),  # shapes differ (broadcast)
        (np.ones(3, np.float16), np.ones(3, np.float16)),  # half precision
        (np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32)),  # above the limit
    ],
    ids=["dtypes", "shapes", "float16", "large"],
)
def test_sums_numpy_would_not_match_are_left_to_the_compiled_add(held, grad):
    assert _host_eval.sum_into(held, grad) is NotImplemented


def test_abs_and_sign_give_the_compiled_programs_signed_zeros_and_nans():
    x = np.array([-0.0, 0.0, np.nan, -np.inf, 2.5, -3.0], np.float32)
    for name, op in (("abs", tp.abs), ("sign", tp.sign), ("x*sign", lambda t: t * t.sign())):
        with events(COMPILE) as compiles:
            got = op(tp.tensor(x)).numpy()
        old = STATE.host_limit
        STATE.host_limit = 0  # the compiled program (XLA)
        try:
            want = op(tp.tensor(x)).numpy()
        finally:
            STATE.host_limit = old
        assert not compiles, name  # evaluated with NumPy
        np.testing.assert_array_equal(got, want, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)
