"""The owner's step with parameters on several devices: each steps on its own device.

Single process, virtual CPU devices (tests/conftest.py); expected values by hand
(SGD: p - lr * g).
"""

from __future__ import annotations

import jax
import numpy as np
import optax

import tensorplay_jax as tp
from tensorplay_jax.distributed.optim._local import LocalOptimizer


def test_parameters_on_two_devices_step_where_they_are():
    cpus = jax.devices("cpu")
    a = tp.tensor(jax.device_put(np.array([1.0, 2.0], np.float32), cpus[1]), requires_grad=True)
    b = tp.tensor(jax.device_put(np.array([3.0], np.float32), cpus[2]), requires_grad=True)
    opt = LocalOptimizer(optax.sgd(0.5), [a, b])
    # one gradient on the host, one on a third device: each goes to its parameter's device
    grads = {a: np.array([2.0, 4.0], np.float32), b: jax.device_put(np.float32([2.0]), cpus[3])}
    assert opt.step(grads) == 2
    np.testing.assert_allclose(np.asarray(a.value), [0.0, 0.0])
    np.testing.assert_allclose(np.asarray(b.value), [2.0])
    assert a.value.devices() == {cpus[1]} and b.value.devices() == {cpus[2]}
