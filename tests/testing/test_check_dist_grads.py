"""``check_dist_grads`` over three real workers: it passes on right models, fails on wrong ones.

One job for the module (``dist_workers_module``); this process is ``worker0``.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from tensorplay_jax.distributed import rpc
from tensorplay_jax.testing import check_dist_grads, default_tolerance, in_process_rpc
from tests.testing import _models as M
from tests.testing import _workers as W

pytestmark = pytest.mark.workers(3)


def test_multi_hop(dist_workers_module):
    check_dist_grads(M.two_hops, (M.rand(0, 3, 3), M.rand(1, 2, 3)))


def test_nested_rpc_dict_args_and_pytree_output(dist_workers_module):
    params = {"w1": M.rand(2, 3, 3), "w2": M.rand(3, 3, 4)}
    check_dist_grads(M.nested, (params, M.rand(4, 2, 3)))


def test_remote_to_here_and_rpc_async(dist_workers_module):
    check_dist_grads(M.with_remote, (M.rand(5, 3, 3), M.rand(6, 2, 3)))


def test_rref_held_parameters(dist_workers_module):
    p1 = rpc.remote("worker1", M.make_param, args=(7, 3, 3))
    p2 = rpc.remote("worker2", M.make_param, args=(8, 3, 2))
    check_dist_grads(M.rref_params, (p1, p2, M.rand(9, 2, 3)))


def test_a_right_custom_backward_passes(dist_workers_module):
    check_dist_grads(M.right_backward, (M.rand(10, 4),))


def test_jax_mode_differentiable_rpc(dist_workers_module):
    check_dist_grads(M.functional, (M.rand(11, 3, 3), M.rand(12, 2, 3)), mode="jax")


# ------------------------------------------------------------------ mutations: it must fail
def test_fails_on_a_wrong_custom_backward(dist_workers_module):
    with pytest.raises(AssertionError) as e:
        check_dist_grads(M.wrong_backward, (M.rand(13, 4),))
    msg = str(e.value)
    assert "the gradient of args[0] (float32[4])" in msg, msg
    assert "differs from jax.grad of the same computation run in one process" in msg, msg
    assert "max abs error" in msg and "max rel error 0.5" in msg, msg


def test_fails_on_a_mutated_engine_rule_on_one_worker(dist_workers_module):
    # worker2's recv nodes send back 1.25x the gradient; worker1's stay right
    dist_workers_module.run("worker2", W.scale_engine_gradients, 1.25)
    try:
        params = {"w1": M.rand(2, 3, 3), "w2": M.rand(3, 3, 4)}
        with pytest.raises(
            AssertionError, match=r"gradient of args\[0\]\['w1'\] \(float32\[3x3\]\)"
        ):
            check_dist_grads(M.nested, (params, M.rand(4, 2, 3)))
        # a loss that never reaches worker2 is still right
        check_dist_grads(M.right_backward, (M.rand(10, 4),))
    finally:
        dist_workers_module.run("worker2", W.scale_engine_gradients, 1.0)
    check_dist_grads(M.nested, (params, M.rand(4, 2, 3)))


def test_finite_differences_catch_what_both_autodiff_paths_share(dist_workers_module, monkeypatch):
    # Make the oracle itself wrong (jax.grad sees a wrong rule too): only the finite
    # differences notice, and name the leaf.
    import jax

    real = jax.value_and_grad

    def skewed(f, *a, **k):
        vg = real(f, *a, **k)

        def run(*args):
            v, g = vg(*args)
            return v, jax.tree_util.tree_map(lambda t: t * 1.1, g)

        return run

    monkeypatch.setattr(jax, "value_and_grad", skewed)
    with pytest.raises(
        AssertionError, match=r"args\[0\] .*finite differences along its own direction"
    ):
        check_dist_grads(M.right_backward_jax, (M.rand(14, 4), M.rand(15, 4)), mode="jax")


# ------------------------------------------------------------------ the pieces
def test_in_process_rpc_runs_here_and_restores(dist_workers_module):
    before = rpc.rpc_sync
    with in_process_rpc():
        assert rpc.rpc_sync("worker1", W.whoami)[0] == "worker0"  # ran here
        assert rpc.remote("worker2", abs, args=(-2,)).to_here() == 2
        assert rpc.rpc_async("worker1", max, args=(1, 5)).wait() == 5
        with pytest.raises(ValueError, match="nope"):
            rpc.rpc_sync("nope", abs, args=(1,))  # names are checked as over RPC
        with pytest.raises(RuntimeError, match="already active"), in_process_rpc():
            pass
    assert rpc.rpc_sync is before
    assert rpc.rpc_sync("worker1", W.whoami)[0] == "worker1"


def test_in_process_rpc_serves_every_import_form(dist_workers_module):
    from tensorplay_jax.rpc import remote, rpc_sync  # bound before the block

    with in_process_rpc():
        from tensorplay_jax.distributed.rpc import rpc_async

        assert rpc_sync("worker1", W.whoami)[0] == "worker0"  # served here
        assert rpc_async("worker2", W.whoami).wait()[0] == "worker0"
        assert remote("worker1", W.whoami).to_here()[0] == "worker0"
    assert rpc_sync("worker1", W.whoami)[0] == "worker1"  # the real agent again


def test_default_tolerances_by_dtype():
    assert default_tolerance(jnp.float64)[0] < default_tolerance(jnp.float32)[0]
    assert default_tolerance(jnp.float32)[0] < default_tolerance(jnp.bfloat16)[0]


def test_bad_arguments(dist_workers_module):
    with pytest.raises(ValueError, match="mode='torch'"):
        check_dist_grads(M.two_hops, (M.rand(0, 3, 3), M.rand(1, 2, 3)), mode="torch")
    with pytest.raises(ValueError, match="no floating array"):
        check_dist_grads(lambda n: n, (3,))
