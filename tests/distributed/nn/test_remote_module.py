"""RemoteModule over one job of three workers: this process (worker0) drives, worker1 owns,
worker2 borrows a handle. Expected values come from numpy or a local copy of the module."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tests._worker import expect, npa
from tests.distributed.nn import _targets as T

# One CPU device per started worker, as a worker of a real job has ("cpu:3" must not exist).
pytestmark = pytest.mark.workers(
    3, timeout=120, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
)


@pytest.fixture(scope="module", autouse=True)
def job(dist_workers_module):
    return dist_workers_module


@pytest.fixture
def rm() -> RemoteModule:
    """A fresh ``Scaled(3, 2, scale=2)`` on worker1, addressed by rank."""
    return RemoteModule("rank:1", T.Scaled, args=(3, 2), kwargs={"scale": 2.0})


def _x3() -> tp.Tensor:
    return tp.ones(5, 3)


def _scaled_reference(rm: RemoteModule, x: tp.Tensor) -> np.ndarray:
    """``2 * (x W^T + b)`` with the owner's current parameters, in numpy."""
    w, b = (npa(r.to_here()) for r in rm.remote_parameters())
    return 2.0 * (npa(x) @ w.T + b)


# ---------------------------------------------------------------- the seed example
def test_seed_example_runs_linear_on_worker1():
    tp.manual_seed(0)
    remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
    x = tp.randn(4, 16)
    out = remote_linear(x)
    assert isinstance(out, tp.Tensor) and out.shape == (4, 8), out
    w, b = (r.to_here() for r in remote_linear.remote_parameters())
    assert w.shape == (8, 16) and b.shape == (8,)
    np.testing.assert_allclose(npa(out), npa(x) @ npa(w).T + npa(b), rtol=1e-5, atol=1e-5)


def test_remote_parameters_are_rrefs_owned_by_worker1():
    remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
    param_rrefs = remote_linear.remote_parameters()
    assert len(param_rrefs) == 2 and all(isinstance(r, rpc.RRef) for r in param_rrefs)
    assert {r.owner_name() for r in param_rrefs} == {"worker1"}
    module_rref = remote_linear.get_module_rref()
    assert module_rref.owner_name() == "worker1" and not module_rref.is_owner()


def test_handle_names_its_worker_and_device():
    remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
    assert remote_linear.on == rpc.get_worker_info("worker1")
    assert remote_linear.device == "cpu"
    assert repr(remote_linear) == "RemoteModule(on='worker1', device='cpu')"
    assert isinstance(remote_linear, tp.nn.Module)


# ---------------------------------------------------------------- calls
def test_rank_destination_without_device_part(rm):
    assert rm.on.name == "worker1" and rm.device == "cpu"


def test_constructor_kwargs_reach_the_module(rm):
    np.testing.assert_allclose(npa(rm(_x3())), _scaled_reference(rm, _x3()), rtol=1e-5, atol=1e-6)


def test_forward_kwargs_and_forward_async(rm):
    y0 = npa(rm(_x3()))
    np.testing.assert_allclose(npa(rm.forward(_x3(), shift=10.0)), y0 + 10.0, rtol=1e-6)
    np.testing.assert_allclose(npa(rm.forward_async(_x3(), shift=1.0).wait()), y0 + 1.0, rtol=1e-6)
    assert rm.module_rref.rpc_sync().count() == 3


def test_concurrent_forward_async_calls_each_get_their_result(rm):
    y0 = npa(rm(_x3()))
    futs = [rm.forward_async(_x3(), shift=float(i)) for i in range(6)]
    for i, f in enumerate(futs):
        np.testing.assert_allclose(npa(f.wait()), y0 + i, rtol=1e-6, err_msg=f"call {i}")


def test_remote_parameters_recurse(rm):
    assert len(rm.remote_parameters()) == 2
    assert len(rm.remote_parameters(recurse=False)) == 0


def test_train_and_eval_switch_the_remote_module(rm):
    assert rm.training and rm.module_rref.rpc_sync().mode() is True
    assert rm.eval() is rm and not rm.training
    assert rm.module_rref.rpc_sync().mode() is False
    rm.train()
    assert rm.training and rm.module_rref.rpc_sync().mode() is True


def test_train_rejects_a_non_boolean(rm):
    expect(ValueError, ["boolean"], rm.train, "yes")


# ---------------------------------------------------------------- more handles
def test_init_from_module_rref_is_a_second_handle_on_the_same_module(rm):
    y0 = npa(rm(_x3()))
    twin = RemoteModule.init_from_module_rref("worker1/cpu", rm.get_module_rref())
    before = twin.module_rref.rpc_sync().count()
    np.testing.assert_allclose(npa(twin(_x3())), y0, rtol=1e-6)
    assert rm.module_rref.rpc_sync().count() == before + 1
    assert twin.training


def test_init_from_module_rref_naming_another_worker_calls_the_owner(rm):
    # torch: the handle's ``on`` is the worker named; the module stays where it is
    twin = RemoteModule.init_from_module_rref("worker2/cpu", rm.get_module_rref())
    assert twin.on.name == "worker2"
    np.testing.assert_array_equal(npa(twin(_x3())), npa(rm(_x3())))
    got, on, owner = rpc.rpc_sync("worker2", T.call_remote_module, args=(twin, _x3()))
    np.testing.assert_array_equal(npa(got), npa(rm(_x3(), shift=1.0)))
    assert (on, owner) == ("worker2", "worker1")


def test_a_remote_module_cannot_be_pickled_outside_rpc(rm, tmp_path):
    with pytest.raises(RuntimeError, match="Cannot pickle RemoteModule in python pickler"):
        pickle.dumps(rm)
    with pytest.raises(RuntimeError, match="RemoteModule can only be pickled when using RPC"):
        tp.save(rm, tmp_path / "rm.pt")


def test_init_from_module_rref_needs_an_rref_to_a_module():
    expect(TypeError, ["must be an RRef"], RemoteModule.init_from_module_rref, "worker1", 3)
    expect(
        TypeError,
        ["not a tensorplay_jax.nn.Module"],
        RemoteModule.init_from_module_rref,
        "worker1",
        rpc.remote("worker1", T.not_a_module),
    )


def test_handle_passed_to_a_third_worker_works_there(rm):
    y0 = npa(rm(_x3()))
    y3, on, owner = rpc.rpc_sync("worker2", T.call_remote_module, args=(rm, _x3()))
    np.testing.assert_allclose(npa(y3), y0 + 1.0, rtol=1e-6)
    assert (on, owner) == ("worker1", "worker1")


def test_handle_comes_back_over_rpc_working(rm):
    y0 = npa(rm(_x3()))
    back = rpc.rpc_sync("worker2", T.identity, args=(rm,))
    assert isinstance(back, RemoteModule) and back.module_rref.owner_name() == "worker1"
    np.testing.assert_allclose(npa(back(_x3())), y0, rtol=1e-6)


# ---------------------------------------------------------------- what a handle refuses
_LOCAL_STATE_METHODS = (
    "to",
    "cuda",
    "cpu",
    "float",
    "double",
    "type",
    "register_buffer",
    "register_parameter",
    "add_module",
    "apply",
    "state_dict",
    "load_state_dict",
    "named_parameters",
    "buffers",
    "children",
    "modules",
    "zero_grad",
    "requires_grad_",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_backward_hook",
    "named_modules",
)


def test_methods_that_touch_local_state_raise(rm):
    for name in _LOCAL_STATE_METHODS:
        words = [f"Method ``{name}`` not supported for RemoteModule"]
        expect(ValueError, words, getattr(rm, name), None)


def test_parameters_points_to_remote_parameters(rm):
    expect(
        ValueError,
        [
            "Method ``parameters`` not supported for RemoteModule. "
            "Please use ``remote_parameters`` instead."
        ],
        rm.parameters,
    )


@pytest.mark.parametrize(
    "exc, words, args",
    [
        (
            ValueError,
            [
                "Expect `module_cls(*args, **kwargs)` returns an instance of <class nn.Module>",
                "built a list, not a tensorplay_jax.nn.Module",
            ],
            ("worker1/cpu", T.not_a_module),
        ),
        (TypeError, ["module_cls=3 is not callable"], ("worker1", 3)),
        (TypeError, ["kwargs must be a dict"], ("worker1", T.Scaled, (1, 1), 5)),
        (
            ValueError,
            ["unknown destination worker name 'nobody'"],
            ("nobody/cpu", tp.nn.Linear, (1, 1)),
        ),
        (
            RuntimeError,
            ["worker 'worker1' has no device 'cuda:0'"],
            ("worker1/cuda:0", tp.nn.Linear, (1, 1)),
        ),
        (ValueError, ["unknown device type 'xpu'"], ("worker1/xpu", T.Scaled)),
        (ValueError, ["unknown destination worker rank 7"], ("rank:7", T.Scaled)),
        (
            RuntimeError,
            ["has no device 'cpu:3'", "cpu:0"],
            ("worker1/cpu:3", tp.nn.Linear, (1, 1)),
        ),
    ],
    ids=[
        "module-cls-builds-a-list",
        "module-cls-not-callable",
        "kwargs-not-a-dict",
        "unknown-worker",
        "no-cuda",
        "unknown-device-type",
        "unknown-rank",
        "no-cpu3",
    ],
)
def test_constructor_errors(exc, words, args):
    expect(exc, words, RemoteModule, *args)


def test_device_cpu0_is_accepted():
    assert RemoteModule("worker1/cpu:0", tp.nn.Linear, (1, 1)).device == "cpu:0"


# ---------------------------------------------------------------- interfaces
def test_interface_methods_are_callable_on_the_handle():
    ri = RemoteModule("worker1/cpu", T.Scaled, (3, 2), module_interface_cls=T.ScaledInterface)
    assert ri.generated_methods == ("forward", "project", "count", "add_scale")
    ri(_x3())
    assert ri.count() == 1 and ri.count_async().wait() == 1
    assert ri.add_scale(0.5) == 1.5 and ri.add_scale_async(0.5).wait() == 2.0


def test_interface_through_the_legacy_keyword():
    legacy = RemoteModule("worker1", T.Scaled, (3, 2), _module_interface_cls=T.ScaledInterface)
    assert legacy.count() == 0


def test_only_declared_methods_exist_on_the_handle(rm):
    ri = RemoteModule("worker1/cpu", T.Scaled, (3, 2), module_interface_cls=T.ScaledInterface)
    expect(AttributeError, ["no attribute 'mode'", "count_async"], getattr, ri, "mode")
    expect(AttributeError, ["no attribute 'count'"], getattr, rm, "count")


@pytest.mark.parametrize(
    "iface, words",
    [
        (T.NeedsReset, ["does not implement method `reset`", "NeedsReset"]),
        (T.WrongArgs, ["has no parameter 'gamma'", "WrongArgs.forward"]),
        (T.Scaled, ["is not an interface", "@tensorplay_jax.distributed.nn.api.interface"]),
    ],
    ids=["missing-method", "wrong-signature", "not-an-interface"],
)
def test_interface_is_checked_at_construction(iface, words):
    expect(TypeError, words, RemoteModule, "worker1", T.Scaled, (3, 2), module_interface_cls=iface)


def test_interface_is_checked_by_init_from_module_rref(rm):
    expect(
        TypeError,
        ["does not implement method `reset`"],
        RemoteModule.init_from_module_rref,
        "worker1",
        rm.get_module_rref(),
        T.NeedsReset,
    )


# ---------------------------------------------------------------- distributed autograd
@pytest.fixture
def trained():
    """``Scaled(3, 2, scale=2)`` on worker1 with its interface, its parameters and an input."""
    tp.manual_seed(1)
    g = RemoteModule(
        "worker1/cpu",
        T.Scaled,
        (3, 2),
        kwargs={"scale": 2.0},
        module_interface_cls=T.ScaledInterface,
    )
    prefs = g.remote_parameters()
    return g, prefs, tp.randn(5, 3, requires_grad=True)


def test_gradients_land_on_the_owner_and_match_a_local_module(trained):
    g, prefs, xg = trained
    w, b = (r.to_here() for r in prefs)
    with dist_autograd.context() as ctx:
        y = g(xg, shift=1.0)
        y2 = g.forward_async(xg).wait()
        dist_autograd.backward(ctx, [(y * y).sum() + y2.sum()])
        gw, gb = rpc.rpc_sync("worker1", T.grads_of, args=(ctx, prefs))
        gx = dist_autograd.get_gradients(ctx)[xg]
    local = T.Scaled(3, 2, scale=2.0)
    local.load_state_dict({"fc.weight": w, "fc.bias": b})
    xl = tp.tensor(npa(xg), requires_grad=True)
    yl = local(xl, shift=1.0)
    ((yl * yl).sum() + local(xl).sum()).backward()
    np.testing.assert_allclose(gw, npa(local.fc.weight.grad), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb, npa(local.fc.bias.grad), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(npa(gx), npa(xl.grad), rtol=1e-5, atol=1e-6)
    assert rpc.rpc_sync("worker1", T.local_grads, args=(prefs,)) == [None, None]


def test_gradients_accumulate_within_one_context_only(trained):
    g, prefs, xg = trained
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [g(xg).sum()])
    with dist_autograd.context() as ctx2:
        dist_autograd.backward(ctx2, [g(xg).sum()])
        dist_autograd.backward(ctx2, [g(xg).sum()])
        _, gb2 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx2, prefs))
    # d sum(2 (x W^T + b)) / db = 2 per row, 5 rows, twice
    np.testing.assert_allclose(gb2, np.full(2, 2 * 2.0 * 5), rtol=1e-6)


def test_a_twin_handle_trains_the_same_parameters(trained):
    g, prefs, xg = trained
    twin = RemoteModule.init_from_module_rref("worker1", g.get_module_rref())
    with dist_autograd.context() as ctx3:
        dist_autograd.backward(ctx3, [twin(xg).sum()])
        _, gb3 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx3, prefs))
    np.testing.assert_allclose(gb3, np.full(2, 2.0 * 5), rtol=1e-6)


def test_a_declared_method_with_a_keyword_is_differentiable(trained):
    g, prefs, xg = trained
    w = npa(prefs[0].to_here())
    with dist_autograd.context() as ctx5:
        dist_autograd.backward(ctx5, [g.project(xg, bias=False).sum()])
        gw5, gb5 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx5, prefs))
        gx5 = dist_autograd.get_gradients(ctx5)[xg]
    assert gb5 is None
    np.testing.assert_allclose(gw5, np.tile(npa(xg).sum(0), (2, 1)), rtol=1e-5)
    np.testing.assert_allclose(npa(gx5), np.tile(w.sum(0), (5, 1)), rtol=1e-5)


def test_a_third_worker_runs_forward_and_backward_through_the_handle(trained):
    g, _, _ = trained
    gw4, gb4 = rpc.rpc_sync("worker2", T.backward_on_third, args=(g, tp.ones(5, 3)))
    np.testing.assert_allclose(gb4, np.full(2, 2.0 * 5), rtol=1e-6)
    np.testing.assert_allclose(gw4, np.full((2, 3), 2.0 * 5), rtol=1e-6)
