"""The owner-side step (LocalOptimizer) against plain optax, in this process."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tensorplay_jax as tp
from tensorplay_jax.distributed.optim._local import LocalOptimizer
from tests.distributed.optim._cases import OPTIMIZERS, local_steps


def _params():
    rng = np.random.default_rng(0)
    return [tp.nn.Parameter(rng.normal(size=s).astype(np.float32)) for s in [(3, 4), (4,), (2,)]]


def _grads(seed):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in [(3, 4), (4,), (2,)]]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_two_steps_match_optax(name):
    params = _params()
    init = [p.value for p in params]
    opt = LocalOptimizer(OPTIMIZERS[name](), params)
    steps = [_grads(1), _grads(2)]
    for gs in steps:
        # gradients keyed by the parameter Tensor, as get_gradients returns them
        assert opt.step({p: tp.Tensor(g) for p, g in zip(params, gs, strict=True)}) == 3
    want = local_steps(OPTIMIZERS[name](), init, steps)
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(np.asarray(p.value), np.asarray(w), rtol=1e-6, atol=1e-7)


def test_parameter_without_gradient_keeps_value_and_state():
    params = _params()
    opt = LocalOptimizer(optax.adam(0.1), params)
    before = np.asarray(params[1].value)
    opt.step({params[0]: _grads(1)[0], params[2]: _grads(1)[2]})
    np.testing.assert_array_equal(np.asarray(params[1].value), before)
    assert int(opt.states[1][0].count) == 0 and int(opt.states[0][0].count) == 1
    assert opt.step({}) == 0
    # the skipped parameter's first real step is adam's first step
    g = _grads(3)[1]
    opt.step({params[1]: g})
    want = local_steps(optax.adam(0.1), [jnp.asarray(before)], [[g]])[0]
    np.testing.assert_allclose(np.asarray(params[1].value), np.asarray(want), rtol=1e-6)


def test_parameters_keep_identity_and_stay_leaves():
    params = _params()
    ids = [id(p) for p in params]
    opt = LocalOptimizer(optax.sgd(0.5), params)
    opt.step({p: g for p, g in zip(params, _grads(1), strict=True)})
    assert [id(p) for p in opt.params] == ids
    assert all(p.requires_grad and p.is_leaf for p in params)


def test_concurrent_steps_are_serialised():
    params = _params()
    init = np.asarray(params[0].value)
    opt = LocalOptimizer(optax.sgd(1.0), params)
    g = jnp.ones((3, 4), jnp.float32)
    threads = [threading.Thread(target=opt.step, args=({params[0]: g},)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(np.asarray(params[0].value), init - 16.0, rtol=1e-6)
