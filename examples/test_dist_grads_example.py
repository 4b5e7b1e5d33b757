"""Testing distributed code with ``tensorplay_jax.testing``: a complete pytest file.

Run it with ``pytest examples/test_dist_grads_example.py``. The ``tensorplay_jax``
pytest plugin (installed with the package) starts the workers: this process is
``worker0``, two new processes are ``worker1`` and ``worker2``.
"""

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.distributed import rpc
from tensorplay_jax.testing import check_dist_grads

pytestmark = pytest.mark.workers(3)  # one job of 3 workers for the whole module


def rand(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# Functions the workers run: defined in the test file, found there by name.
def stage(w, x):
    return tp.tanh(x @ w)


def make_weight(seed, n):
    return tp.tensor(rand(seed, n, n), requires_grad=True)  # a parameter its owner keeps


def apply_weight(w_rref, x):
    return stage(w_rref.local_value(), x)


def test_runs_on_a_named_worker(dist_workers_module):
    out = dist_workers_module.run("worker2", stage, tp.ones(2, 2), tp.ones(1, 2))
    np.testing.assert_allclose(out.value, np.tanh([[2.0, 2.0]]), rtol=1e-6)


def test_pipeline_gradients(dist_workers_module):
    def loss(w1, w2, x):  # stage 1 on worker1, stage 2 on worker2
        h = rpc.rpc_sync("worker1", stage, args=(w1, x))
        return (rpc.rpc_sync("worker2", stage, args=(w2, h)) ** 2).mean()

    # every leaf: distributed autograd == jax.grad in one process == finite differences
    check_dist_grads(loss, (rand(0, 4, 4), rand(1, 4, 4), rand(2, 8, 4)))


def test_parameter_server_gradients(dist_workers_module):
    w = rpc.remote("worker1", make_weight, args=(3, 4))  # an RRef leaf: checked on its owner

    def loss(w, x):
        h = rpc.rpc_sync("worker1", apply_weight, args=(w, x))
        return rpc.rpc_sync("worker2", stage, args=(rand(4, 4, 2), h)).sum()

    check_dist_grads(loss, (w, rand(5, 8, 4)))
