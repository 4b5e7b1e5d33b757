"""Context lifecycle, release, retain_graph, errors and concurrency over real worker processes.

One job of four workers per transport (this process is w0; w3 only serves), driven from
here; every check runs in this process on what the workers return.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import optax
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.autograd.api import gradient_arrays
from tensorplay_jax.testing import Workers
from tests._procs import free_port
from tests._worker import expect, wait_until
from tests.distributed.autograd import _targets as T
from tests.distributed.autograd import _workers as W
from tests.rpc._transports import env_of


@pytest.fixture(scope="module", params=["grpc", "local"])
def job(request):
    # This process is w0, so it takes the transport's environment too.
    env = env_of(request.param)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        workers = Workers(4, names=["w0", "w1", "w2", "w3"], timeout=120, env=env)
        try:
            yield workers.start()
        finally:
            workers.close()


def test_distributed_autograd_is_up_on_every_worker(job):
    assert job.run_all(W.autograd_ready) == dict.fromkeys(job.names, True)


def test_context_ids_carry_the_creating_rank_and_one_context_per_thread(job):
    with dist_autograd.context() as c0:
        assert c0 >> 48 == 0 and c0 > 0  # the creating worker's rank in the high 16 bits
        expect(
            RuntimeError,
            ["Already have an autograd context id for this thread"],
            dist_autograd.context().__enter__,
        )
        other = []
        th = threading.Thread(target=lambda: other.append(dist_autograd.context().__enter__()))
        th.start()
        th.join()
        assert other and other[0] != c0
        assert dist_autograd._current_context().context_id == c0


def test_callees_record_under_the_same_id_without_tensors(job):
    with dist_autograd.context() as cid:
        assert rpc.rpc_sync("w1", T.context_here) == cid
        assert rpc.rpc_sync("w1", T.nested_plain, args=("w2",)) == cid
        assert rpc.rpc_async("w2", T.context_here).wait() == cid
        assert rpc.remote("w1", T.context_here).to_here() == cid
        assert rpc.rpc_sync("w2", T.has_context, args=(cid,))


def test_a_served_calls_deferred_work_has_run_when_the_call_returns(job):
    # remote() keeps the result on its owner: nothing there reads its value, so only
    # the end of the served call runs the deferred multiplication
    r = rpc.remote("w3", T.scaled_leaf, args=(3.0,))
    assert rpc.rpc_sync("w3", T.still_pending, args=(r,)) is False
    np.testing.assert_allclose(r.to_here().numpy(), [3.0, 3.0, 3.0])


def test_to_here_of_a_tensor_free_value_reaches_its_owner(job):
    counter = rpc.remote("w3", T.plain_value, args=(5,))
    with dist_autograd.context() as cid:
        # checked from a thread outside the context, so the check does not carry the id
        seen = []
        check = lambda: seen.append(rpc.rpc_sync("w3", T.has_context, args=(cid,)))
        th = threading.Thread(target=check)
        th.start()
        th.join()
        assert seen == [False]
        assert counter.to_here() == 5
        th = threading.Thread(target=check)
        th.start()
        th.join()
        assert seen == [False, True]


def test_a_context_is_released_everywhere_then_every_use_raises(job):
    with dist_autograd.context() as cid:
        for w in ("w1", "w2", "w3"):
            assert rpc.rpc_sync(w, T.context_here) == cid
    for w in ("w1", "w2", "w3"):  # released everywhere within 10 s
        wait_until(lambda: not rpc.rpc_sync(w, T.has_context, args=(cid,)), timeout=10)  # noqa: B023
    msg = f"Could not find autograd context with id: {cid}"
    x = tp.ones(2, requires_grad=True)
    expect(RuntimeError, [msg], dist_autograd.get_gradients, cid)
    expect(RuntimeError, [msg], dist_autograd.backward, cid, [(x * 2).sum()])


def test_retain_graph_passes_accumulate_then_a_clear_error(job):
    t = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with dist_autograd.context() as cid:
        loss = (rpc.rpc_sync("w1", T.double, args=(t,)) * t).sum()  # d/dt = 4 t
        for _ in range(1000):
            dist_autograd.backward(cid, [loss], retain_graph=True)
        dist_autograd.backward(cid, [loss])
        g = dist_autograd.get_gradients(cid)[t]
        np.testing.assert_allclose(np.asarray(g), 1001 * 4 * np.array([1.0, 2.0, 3.0]))
        expect(
            RuntimeError,
            ["backward through the graph a second time", "retain_graph=True"],
            dist_autograd.backward,
            cid,
            [loss],
        )
    assert t.grad is None


def test_the_remote_half_of_a_freed_graph_raises(job):
    t = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w1", T.double, args=(t,))
        dist_autograd.backward(cid, [y.sum()])
        y2 = y * 1.0  # new local graph over the freed recv node
        expect(
            RuntimeError,
            ["backward through the graph a second time"],
            dist_autograd.backward,
            cid,
            [y2.sum()],
        )
    assert t.grad is None


_UNKNOWN = ["Could not find autograd context with id: 12345"]
_INVALID = {
    "empty": (lambda cid, y: dist_autograd.backward(cid, []), RuntimeError, ["roots is empty"]),
    "not-scalar": (
        lambda cid, y: dist_autograd.backward(cid, [y]),
        RuntimeError,
        ["roots[0] has shape (3,)", "scalar"],
    ),
    "no-grad": (
        lambda cid, y: dist_autograd.backward(cid, [tp.tensor(1.0)]),
        RuntimeError,
        ["roots[0] does not require grad"],
    ),
    "no-grad-and-not-scalar": (  # tensorplay checks requires_grad first
        lambda cid, y: dist_autograd.backward(cid, [tp.ones(3, 3)]),
        RuntimeError,
        ["roots[0] does not require grad", "requires_grad not set on"],
    ),
    "leaf": (
        lambda cid, y: dist_autograd.backward(cid, [tp.ones(1, requires_grad=True)]),
        RuntimeError,
        ["roots[0] does not have a valid gradient function", "leaf"],
    ),
    "float": (
        lambda cid, y: dist_autograd.backward(cid, 1.0),
        TypeError,
        ["roots is a float", "a Tensor or"],
    ),
    "float-in-list": (
        lambda cid, y: dist_autograd.backward(cid, [y.sum(), 1.0]),
        TypeError,
        ["roots[1] is a float"],
    ),
    "unknown-context": (
        lambda cid, y: dist_autograd.backward(12345, [y.sum()]),
        RuntimeError,
        _UNKNOWN,
    ),
    "unknown-context-gradients": (
        lambda cid, y: dist_autograd.get_gradients(12345),
        RuntimeError,
        _UNKNOWN,
    ),
    "tensor-backward": (
        lambda cid, y: y.sum().backward(),
        RuntimeError,
        ["autograd.backward(context_id", "outside distributed autograd"],
    ),
}


@pytest.mark.parametrize("case", list(_INVALID))
def test_invalid_backward_arguments_raise_and_the_context_stays_usable(job, case):
    call, exc, words = _INVALID[case]
    t = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w1", T.double, args=(t,))
        expect(exc, words, call, cid, y)
        dist_autograd.backward(cid, [y.sum()])  # still fine afterwards
        assert set(dist_autograd.get_gradients(cid)) == {t}


def test_an_exception_in_a_remote_backward_names_the_worker(job):
    t = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w1", T.raise_in_backward, args=(t,))
        words = ["Error on Node 1: ", "boom in backward", "on worker 'w1'"]
        expect(RuntimeError, words, dist_autograd.backward, cid, [y.sum()])
        z = rpc.rpc_sync("w1", T.relay, args=(t, "w2", T.raise_in_backward))
        words = ["Error on Node 2: ", "boom in backward", "on worker 'w2'"]
        expect(RuntimeError, words, dist_autograd.backward, cid, [z.sum()])
        ok = rpc.rpc_sync("w2", T.double, args=(t,))  # the context stays usable
        dist_autograd.backward(cid, [ok.sum()])
        np.testing.assert_allclose(np.asarray(dist_autograd.get_gradients(cid)[t]), 2.0)


def test_twenty_threads_on_each_of_three_workers_at_once(job):
    # each thread its own context with several RPCs and a backward; w3 only serves
    done = job.run_all(W.threads_on_first_three, 20)
    assert done == {"w0": 20, "w1": 20, "w2": 20, "w3": None}, done


def test_two_trainers_two_threads_each_on_one_parameter_server(job):
    rref = rpc.remote("w2", T.make_param, args=(7,))
    remote_trainer = rpc.rpc_async("w1", T.trainer_step, args=("w2", rref, 1, 15))
    mine = [threading.Thread(target=T.trainer_step, args=("w2", rref, s, 15)) for s in (2, 3)]
    also = rpc.rpc_async("w1", T.trainer_step, args=("w2", rref, 4, 15))
    for th in mine:
        th.start()
    for th in mine:
        th.join()
    assert remote_trainer.wait() == 15 and also.wait() == 15


def test_a_worker_dying_in_its_backward_fails_the_backward_in_time(workers, tmp_path):
    # its own job: a worker dies; the graceful shutdown of the survivors must still finish
    out = tmp_path / "seen.json"
    res = workers(W.dead, 3, args=[str(out)], timeout=120, allow_exit={2: 3})
    assert res[2].returncode == 3, str(res[2])
    seen = json.loads(out.read_text())
    assert seen["error"] is not None and "w2" in seen["error"], seen
    assert seen["took"] < 20, seen  # the job's RPC timeout
    np.testing.assert_allclose(seen["grad"], 2.0, err_msg="a backward through the survivor w1")


def test_a_gradient_leaves_as_soon_as_the_pass_reaches_its_recv_node(job):
    # The pass reaches the recv node of w1's result before the Tap made earlier (nodes run
    # newest first). When the Tap runs, w1 must already have its gradient: it left at the
    # recv node, while this worker's pass went on, not after the pass.
    seen = []

    def poll_w1() -> None:
        deadline = time.monotonic() + 10
        while not rpc.rpc_sync("w1", T.gradient_arrived) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(rpc.rpc_sync("w1", T.gradient_arrived))

    with dist_autograd.context() as cid:
        a = tp.ones(2, requires_grad=True)
        later = T.tap(a, poll_w1)
        t = tp.ones(2, requires_grad=True)
        y = rpc.rpc_sync("w1", T.noted_double, args=(t,))
        dist_autograd.backward(cid, [y.sum() + later.sum()])
        grads = dist_autograd.get_gradients(cid)
    assert seen == [True]
    np.testing.assert_allclose(np.asarray(grads[t]), [2.0, 2.0])
    np.testing.assert_allclose(np.asarray(grads[a]), [1.0, 1.0])


# ----------------------------------------------------------------- what get_gradients returns
# y = x * w computed on w1, loss = sum(y * y): d/dx = 2 x w^2 and d/dw = 2 w x^2, by hand
_X, _W = [1.0, -2.0, 3.0], [0.5, 0.25, 2.0]
_GX, _GW = [0.5, -0.25, 24.0], [1.0, 2.0, 36.0]

# The same computation through torch.distributed.autograd (one worker: the RPC is to itself).
_TORCH = """
import json, os, sys
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
rpc.init_rpc("w0", rank=0, world_size=1)
x = torch.tensor(json.loads(sys.argv[2]), requires_grad=True)
w = torch.tensor(json.loads(sys.argv[3]), requires_grad=True)
with dist_autograd.context() as cid:
    y = rpc.rpc_sync("w0", torch.mul, args=(x, w))
    dist_autograd.backward(cid, [(y * y).sum()])
    grads = dist_autograd.get_gradients(cid)
    seen = [
        [type(g).__name__, g.tolist(), g.requires_grad, g.grad_fn is None, g.is_leaf,
         (g * x).requires_grad, (g * 2).grad_fn is None]
        for g in (grads[x], grads[w])
    ]
rpc.shutdown()
print(json.dumps(seen))
"""


def _x_times_w_gradients() -> tuple[tp.Tensor, tp.Tensor, dict, dict]:
    x, w = tp.tensor(_X, requires_grad=True), tp.tensor(_W, requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w1", tp.mul, args=(x, w))
        dist_autograd.backward(cid, [(y * y).sum()])
        grads = dist_autograd.get_gradients(cid)
        arrays = gradient_arrays(cid)
    return x, w, grads, arrays


def test_get_gradients_gives_plain_tensors_equal_to_the_hand_gradient(job):
    x, w, grads, _ = _x_times_w_gradients()
    assert list(grads) == [x, w] or list(grads) == [w, x]
    for g, want in ((grads[x], _GX), (grads[w], _GW)):
        assert type(g) is tp.Tensor
        assert (g.requires_grad, g.grad_fn, g.is_leaf, g.grad) == (False, None, True, None)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)


def test_a_gradient_tensor_wraps_the_context_array_without_a_copy(job):
    x, w, grads, arrays = _x_times_w_gradients()
    assert grads[x].value is arrays[x] and grads[w].value is arrays[w]
    assert isinstance(arrays[x], jax.Array)


def test_a_gradient_tensor_joins_no_tape(job):
    x, _, grads, _ = _x_times_w_gradients()
    g = grads[x]
    assert (g * 2).grad_fn is None
    (g * x).sum().backward()  # a constant factor: x gets g, g gets nothing
    np.testing.assert_allclose(x.grad.numpy(), _GX, rtol=1e-6)
    assert g.grad is None and g.grad_fn is None


def test_optax_steps_on_thegradient_arrays(job):
    x, w, grads, _ = _x_times_w_gradients()
    tx = optax.adam(0.1)
    params = {"x": x.value, "w": w.value}
    updates, _ = jax.jit(tx.update)(
        {"x": grads[x].value, "w": grads[w].value}, tx.init(params), params
    )
    # adam's first update is -lr * g / (|g| + eps): -0.1 * sign(g)
    np.testing.assert_allclose(np.asarray(updates["x"]), [-0.1, 0.1, -0.1], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(updates["w"]), [-0.1, -0.1, -0.1], rtol=1e-5)


def test_a_jitted_optax_update_refuses_a_gradient_tensor_naming_value(job):
    x, _, grads, _ = _x_times_w_gradients()
    tx = optax.adam(0.1)
    params = {"x": x.value}
    expect(TypeError, ["tensor.value"], jax.jit(tx.update), {"x": grads[x]}, tx.init(params))


@functools.cache
def _torch_gradients() -> list:
    out = subprocess.run(
        [sys.executable, "-c", _TORCH, str(free_port()), json.dumps(_X), json.dumps(_W)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK"))},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is the oracle (PYTHONPATH=/tmp/torchlib)",
)
def test_get_gradients_returns_what_torchs_returns_on_the_same_inputs(job):
    x, w, grads, _ = _x_times_w_gradients()
    ours = [
        [
            type(g).__name__,
            g.tolist(),
            g.requires_grad,
            g.grad_fn is None,
            g.is_leaf,
            (g * x).requires_grad,
            (g * 2).grad_fn is None,
        ]
        for g in (grads[x], grads[w])
    ]
    theirs = _torch_gradients()
    for mine, torchs in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine[1], torchs[1], rtol=1e-6)
        assert mine[:1] + mine[2:] == torchs[:1] + torchs[2:], (mine, torchs)
