"""Device maps: JAX arrays keep their device across RPC, on each transport (virtual CPU devices).

One job of two workers per transport: ``w0`` (this process) maps ``cpu:1`` to
``w1``'s ``cpu:2``; ``w1`` maps its ``cpu:3`` to ``w0``'s ``cpu:1``. So ``w0``'s
devices are ``[cpu:1]`` and ``w1``'s ``[cpu:2, cpu:3]`` (their maps' keys and
the reverse maps'). The expected devices follow from those maps by hand.
The job's environment names two GPUs (``CUDA_VISIBLE_DEVICES=5,7``; JAX runs
on CPU): the started worker must be given its own (placement).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tensorplay_jax as tp
from tensorplay_jax import rpc
from tensorplay_jax.distributed import autograd as dist_autograd
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.rpc._device_maps import DeviceMaps
from tensorplay_jax.runtime.device import device_name, local_device_names
from tests._worker import expect
from tests.rpc import _device_targets as D
from tests.rpc import _transports as TR
from tests.rpc._jobs import rpc_job

MAPS = {
    "w0": {"device_maps": {"w1": {"cpu:1": "cpu:2"}}},
    "w1": {"device_maps": {"w0": {"cpu:3": "cpu:1"}}},
}


@pytest.fixture(scope="module", params=TR.NAMES)
def job(request):
    env = {"CUDA_VISIBLE_DEVICES": "5,7"}
    with rpc_job(2, request.param, env=env, rpc_options=MAPS) as w:
        yield w


def on(device: str, values=(1.0, 2.0, 3.0)) -> jax.Array:
    return jax.device_put(np.asarray(values, np.float32), jax.devices("cpu")[int(device[4:])])


def name_of(x) -> str:
    (dev,) = (x._value if isinstance(x, tp.Tensor) else x).devices()
    return device_name(dev)


# ----------------------------------------------------------------- over RPC (one job each)
def test_a_request_array_lands_on_the_mapped_device(job):
    assert rpc.rpc_sync("w1", D.where, args=(on("cpu:1"),)) == "cpu:2"


def test_the_reply_comes_back_by_the_inverse_map(job):
    y = rpc.rpc_sync("w1", D.double, args=(on("cpu:1"),))
    assert name_of(y) == "cpu:1"
    np.testing.assert_array_equal(np.asarray(y), [2.0, 4.0, 6.0])


def test_rpc_async_remote_and_to_here_follow_the_maps(job):
    assert rpc.rpc_async("w1", D.where, args=(on("cpu:1"),)).wait() == "cpu:2"
    rref = rpc.remote("w1", D.double, args=(on("cpu:1"),))
    assert rpc.rpc_sync("w1", D.held_where, args=(rref,)) == "cpu:2"
    assert name_of(rref.to_here()) == "cpu:1"


def test_the_callee_sends_by_its_own_map(job):
    assert job.run("w1", D.send_from, "w0", "cpu:3") == "cpu:1"


def test_a_tensor_keeps_its_device(job):
    t = tp.tensor(on("cpu:1"))
    assert rpc.rpc_sync("w1", D.where, args=(t,)) == "cpu:2"
    back = rpc.rpc_sync("w1", D.double, args=(t,))
    assert isinstance(back, tp.Tensor) and name_of(back) == "cpu:1"


def test_a_call_to_this_worker_keeps_the_device(job):
    assert rpc.rpc_sync("w0", D.where, args=(on("cpu:3"),)) == "cpu:3"
    assert name_of(rpc.rpc_sync("w0", D.double, args=(on("cpu:3"),))) == "cpu:3"


def test_a_host_array_needs_no_map(job):
    assert rpc.rpc_sync("w1", D.where, args=(jnp.ones(2),)) == "cpu:0"
    assert type(rpc.rpc_sync("w1", D.double, args=(np.ones(2),))) is np.ndarray


def test_an_array_on_an_unmapped_device_raises_at_the_sender(job):
    expect(ValueError, ["cpu:3", "'w1'", "set_device_map"],
           rpc.rpc_sync, "w1", D.where, args=(on("cpu:3"),))  # fmt: skip


def test_a_reply_outside_the_callee_devices_fails_the_future(job):
    fut = rpc.rpc_async("w1", D.put_on, args=([1.0], "cpu:1"))
    expect(ValueError, ["cpu:1", "not among this worker's devices", "set_devices"], fut.wait)


def test_a_sharded_array_needs_an_entry_for_every_device_of_its_mesh(job):
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[1:3]), ("x",))
    x = jax.device_put(
        jnp.arange(4.0), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    )  # cpu:1 is mapped, cpu:2 is not (tests/rpc/test_sharded.py: sharded arrays that go)
    expect(ValueError, ["'w1'", "no entry for cpu:2", "every device of its mesh",
                        "set_device_map('w1', {'cpu:2': <its device>})", "jax.device_get"],
           rpc.rpc_sync, "w1", D.where, args=(x,))  # fmt: skip


@pytest.mark.parametrize("through", ["leaf", "op"])
def test_distributed_autograd_gradient_goes_back_to_the_forward_device(job, through):
    x = tp.tensor(on("cpu:1"), requires_grad=True)
    with dist_autograd.context() as cid:
        sent = x if through == "leaf" else x * x
        y = rpc.rpc_sync("w1", D.double, args=(sent,))
        dist_autograd.backward(cid, [y.sum()])
        g = dist_autograd.get_gradients(cid)[x]
    # d/dx sum(2 x) = 2 and d/dx sum(2 x^2) = 4 x, by hand
    want = [2.0, 2.0, 2.0] if through == "leaf" else [4.0, 8.0, 12.0]
    np.testing.assert_allclose(np.asarray(g), want)
    assert name_of(g) == "cpu:1"


@pytest.mark.parametrize("mode", ["jax", "tape"])
def test_differentiable_rpc_follows_the_maps(job, mode):
    x = on("cpu:1")
    with dist_autograd.context() as cid:
        ctx = {"context_id": cid} if mode == "tape" else {}
        g = jax.grad(
            lambda v: dist_autograd.differentiable_rpc(
                "w1", D.square_sum_where, (v,), mode=mode, **ctx
            )
        )(x)
    np.testing.assert_allclose(np.asarray(g), 2 * np.asarray(x))  # d/dx sum(x^2) = 2 x
    assert name_of(g) == "cpu:1"


@pytest.mark.parametrize("mode", ["jax", "tape"])
def test_differentiable_rpc_result_lands_where_its_argument_is(job, mode):
    x = on("cpu:1")
    with dist_autograd.context() as cid:
        ctx = {"context_id": cid} if mode == "tape" else {}
        y = dist_autograd.differentiable_rpc("w1", D.square_sum_where, (x,), mode=mode, **ctx)
    np.testing.assert_allclose(np.asarray(y), 14.0)  # 1 + 4 + 9
    assert name_of(y) == "cpu:1"


def test_remote_module_on_the_mapped_device_answers_by_the_inverse_map(job):
    module = RemoteModule("w1/cpu:2", tp.nn.Linear, args=(3, 2))
    weight, bias = (r.to_here() for r in module.remote_parameters())
    assert {name_of(weight), name_of(bias)} == {"cpu:1"}  # owned on cpu:2, back by the map
    x = on("cpu:1")[None]
    y = module(x)
    assert name_of(y) == "cpu:1"
    # The oracle in float64. A float32 sum of k terms is off by at most about k * eps
    # times the sum of the terms' magnitudes (not of the result, which may cancel).
    x64, w64, b64 = (np.asarray(a, np.float64) for a in (x, weight.value, bias.value))
    want = x64 @ w64.T + b64
    bound = (x64.shape[-1] + 1) * np.finfo(np.float32).eps * (abs(x64) @ abs(w64).T + abs(b64))
    got = np.asarray(y.detach().value, np.float64)
    assert np.all(abs(got - want) <= bound), (got, want, bound)


def test_distributed_optimizer_steps_a_parameter_on_its_device(job):
    x = tp.tensor(on("cpu:1"), requires_grad=True)
    opt = DistributedOptimizer(optax.sgd(0.5), [rpc.RRef(x)])
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w1", D.double, args=(x,))
        dist_autograd.backward(cid, [y.sum()])
        opt.step(cid)
    # x - 0.5 * d/dx sum(2 x) = x - 1, by hand
    np.testing.assert_allclose(np.asarray(x.value), [0.0, 1.0, 2.0])
    assert name_of(x) == "cpu:1"


def test_the_started_worker_is_given_its_own_gpu(job):
    # w1 is local rank 1 of 2: the second GPU, and the variable that says it was placed
    got = job.run("w1", D.environment, ["CUDA_VISIBLE_DEVICES", "TENSORPLAY_JAX_LOCAL_DEVICES"])
    assert got == ["7", "7"]


# ----------------------------------------------------------------- start-up checks
def entry(maps=None, devices=None):
    return {"device_maps": maps or {}, "devices": devices, "local_devices": local_device_names()}


def test_start_up_builds_the_reverse_map_and_default_devices():
    dm = DeviceMaps("a", {}, None)
    dm.build({"a": entry(), "b": entry({"a": {"cpu:1": "cpu:4"}})})
    assert dm.devices == ["cpu:4"]
    assert dm.for_reply("b")(on("cpu:4")) == "cpu:1"


def test_start_up_refuses_a_peer_device_outside_the_given_devices():
    dm = DeviceMaps("a", {}, ["cpu:2"])
    expect(ValueError, ["cpu:4", "devices=['cpu:2']", "set_devices"], dm.build,
           {"a": entry(devices=["cpu:2"]), "b": entry({"a": {"cpu:1": "cpu:4"}})})  # fmt: skip


def test_start_up_refuses_a_map_to_an_unknown_worker():
    dm = DeviceMaps("a", {"c": {"cpu:1": "cpu:1"}}, None)
    expect(ValueError, ["'c'", "not a worker of this job"], dm.build,
           {"a": entry({"c": {"cpu:1": "cpu:1"}})})  # fmt: skip


# ----------------------------------------------------------------- options
def test_set_device_map_adds_entries_and_takes_every_device_form():
    opts = rpc.GrpcRpcBackendOptions(device_maps={"w1": {"cpu:1": "gpu:0"}})
    opts.set_device_map("w1", {jax.devices("cpu")[2]: tp.device("cuda", 1)})
    opts.set_device_map("w2", {"cpu": "tpu"})
    assert opts.device_maps == {
        "w1": {"cpu:1": "cuda:0", "cpu:2": "cuda:1"},
        "w2": {"cpu:0": "tpu:0"},
    }


def test_a_conflicting_entry_raises():
    opts = rpc.GrpcRpcBackendOptions(device_maps={"w1": {"cpu:1": "cuda:0"}})
    expect(ValueError, ["cpu:1", "as cuda:0 already, not cuda:1"],
           opts.set_device_map, "w1", {"cpu:1": "cuda:1"})  # fmt: skip


def test_a_map_is_one_to_one():
    maps = {"w1": {"cpu:1": "cuda:0", "cpu:2": "gpu:0"}}
    expect(ValueError, ["cpu:1 and cpu:2 both map to cuda:0", "one-to-one"],
           rpc.GrpcRpcBackendOptions, device_maps=maps)  # fmt: skip


def test_an_unknown_device_name_raises():
    expect(ValueError, ["set_devices", "'npu:0'"], rpc.GrpcRpcBackendOptions, devices=["npu:0"])
