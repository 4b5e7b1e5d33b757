"""``host_call``: the host callback of a staged ``differentiable_rpc`` (one process, no RPC).

Oracle: the same function applied by NumPy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax.distributed.autograd import _callback
from tensorplay_jax.distributed.autograd._callback import host_call

SPEC = [jax.ShapeDtypeStruct((3,), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)]
X = np.arange(3, dtype=np.float32)


def _run(x: np.ndarray) -> list[np.ndarray]:
    return [np.tanh(x) * 2, np.full(x.shape[:-1], 7, np.int32)]


def _staged(run=_run, method="expand_dims"):
    """A fresh jitted function (jit caches its trace per function object)."""
    return jax.jit(lambda x: host_call(run, SPEC, x, vmap_method=method))


def test_on_cpu_results_are_written_into_xla_buffers():
    assert _callback.buffer_callback is not None, "this JAX has buffer_callback"
    staged = _staged()
    assert "xla_buffer_python_cpu_callback" in staged.lower(X).compile().as_text()
    y, k = staged(X)
    np.testing.assert_allclose(y, np.tanh(X) * 2, rtol=1e-6)
    assert int(k) == 7


def test_under_vmap_one_call_carries_the_batch():
    calls = []

    def run(x):
        calls.append(x.shape)
        return _run(x)

    xs = np.stack([X, X + 1])
    y, k = jax.jit(jax.vmap(lambda x: host_call(run, SPEC, x, vmap_method="expand_dims")))(xs)
    np.testing.assert_allclose(y, np.tanh(xs) * 2, rtol=1e-6)
    np.testing.assert_array_equal(k, [7, 7])
    assert calls == [(2, 3)]


def test_a_result_of_the_wrong_shape_raises_naming_both_shapes():
    def run(x):
        return [np.ones(4, np.float32), np.int32(7)]

    with pytest.raises(jax.errors.JaxRuntimeError, match=r"shape \(4,\).*declared \(3,\)"):
        jax.block_until_ready(_staged(run, "sequential")(X))


def test_inputs_are_read_only_views_of_xla_buffers():
    def run(x):
        x[0] = 1.0
        return _run(x)

    with pytest.raises(jax.errors.JaxRuntimeError, match="read-only"):
        jax.block_until_ready(_staged(run, "sequential")(X))


def test_without_buffer_callback_it_is_pure_callback(monkeypatch):
    monkeypatch.setattr(_callback, "buffer_callback", None)
    staged = _staged()
    assert "xla_buffer_python_cpu_callback" not in staged.lower(X).as_text()
    y, _ = staged(X)
    np.testing.assert_allclose(y, np.tanh(X) * 2, rtol=1e-6)
