"""DistributedOptimizer over one job of three workers (this process is worker0): parity with
plain optax and with a local tensorplay_jax.optim class, untouched parameters, concurrent
steps, an optimizer sent over RPC, errors."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax import optim
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._worker import expect, npa
from tests.distributed.nn import _targets as NT
from tests.distributed.optim import _targets as T
from tests.distributed.optim._cases import OPTIMIZERS, float32_bound, local_trajectory

pytestmark = pytest.mark.workers(3, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def job(dist_workers_module):
    return dist_workers_module


def _values(rrefs):
    return [jnp.asarray(npa(r.to_here())) for r in rrefs]


def _x():
    tp.manual_seed(0)
    return tp.randn(6, 4)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_two_steps_match_optax_with_parameters_on_three_workers(name):
    x = _x()
    make = OPTIMIZERS[name]
    m1 = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    m2 = RemoteModule("worker2", tp.nn.Linear, (3, 2))
    local = tp.nn.Parameter(tp.randn(2).value)
    rrefs = m1.remote_parameters() + m2.remote_parameters() + [rpc.RRef(local)]
    opt = DistributedOptimizer(make(), rrefs)
    start = _values(rrefs)
    seen = []
    for _ in range(2):  # the owners' optimizer state carries over to the second step
        with dist_autograd.context() as ctx:
            out = m2(m1(x).tanh()) + local
            dist_autograd.backward(ctx, [(out * out).sum()])
            g1 = rpc.rpc_sync("worker1", NT.grads_of, args=(ctx, m1.remote_parameters()))
            g2 = rpc.rpc_sync("worker2", NT.grads_of, args=(ctx, m2.remote_parameters()))
            seen.append(
                [jnp.asarray(g) for g in [*g1, *g2, dist_autograd.get_gradients(ctx)[local]]]
            )
            opt.step(ctx)
    got = _values(rrefs)
    # The owners' updates and plain optax here round differently (fused or not): compare
    # within float32 rounding of the magnitudes each step adds (a wrong update is off by
    # orders of magnitude more).
    want = local_trajectory(make(), start, seen)
    for i, g in enumerate(got):
        err = np.abs(np.asarray(g, np.float64) - np.asarray(want[-1][i], np.float64))
        np.testing.assert_array_less(
            err, float32_bound(want, i) + 1e-30, err_msg=f"{name} param {i}"
        )
    moved = [float(jnp.abs(s - g).max()) for s, g in zip(start, got, strict=True)]
    assert all(m > 1e-4 for m in moved), moved


def test_a_class_steps_each_owner_as_the_local_class_steps_on_the_same_gradients():
    x = _x()
    m1 = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    m2 = RemoteModule("worker2", tp.nn.Linear, (3, 2))
    rrefs = m1.remote_parameters() + m2.remote_parameters()
    kwargs = {"lr": 0.05, "weight_decay": 0.01, "amsgrad": True}
    opt = DistributedOptimizer(optim.Adam, rrefs, **kwargs)
    local = [tp.nn.Parameter(tp.tensor(np.asarray(v))) for v in _values(rrefs)]
    local_opt = optim.Adam(local, **kwargs)
    for _ in range(2):  # the owners' Adam state carries over to the second step
        with dist_autograd.context() as ctx:
            dist_autograd.backward(ctx, [(m2(m1(x).tanh()) ** 2).sum()])
            g1 = rpc.rpc_sync("worker1", NT.grads_of, args=(ctx, m1.remote_parameters()))
            g2 = rpc.rpc_sync("worker2", NT.grads_of, args=(ctx, m2.remote_parameters()))
            opt.step(ctx)
        for p, g in zip(local, [*g1, *g2], strict=True):
            p.grad = tp.tensor(np.asarray(g))
        local_opt.step()
    for i, (got, want) in enumerate(zip(_values(rrefs), local, strict=True)):
        np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=f"param {i}")  # fmt: skip


def test_parameters_without_a_gradient_stay_unchanged():
    # on a touched owner (idle1 on worker1) and on an owner the forward never reached (worker2)
    m1 = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    idle1 = RemoteModule("worker1", tp.nn.Linear, (2, 2))
    idle2 = RemoteModule("worker2", tp.nn.Linear, (2, 2))
    rrefs = m1.remote_parameters() + idle1.remote_parameters() + idle2.remote_parameters()
    opt = DistributedOptimizer(optax.adam(0.1), rrefs)
    before = _values(rrefs)
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [m1(_x()).sum()])
        opt.step(ctx)
    after = _values(rrefs)
    assert all(float(jnp.abs(a - b).max()) > 0 for a, b in zip(before[:2], after[:2], strict=True))
    for a, b in zip(before[2:], after[2:], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_concurrent_steps_on_one_owner_are_serialised():
    m = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    prefs = m.remote_parameters()
    opt = DistributedOptimizer(optax.sgd(0.01), prefs)
    w0, b0 = _values(prefs)
    errors = []

    def one_step():
        try:
            with dist_autograd.context() as c:
                dist_autograd.backward(c, [m(tp.ones(2, 4)).sum()])
                opt.step(c)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=one_step) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    w1, b1 = _values(prefs)
    # d(sum(x W^T + b))/db = batch size 2 per step, independent of W: no update may be lost
    # 12 steps of 0.02 each, within float32 rounding of the magnitudes they add (a result that
    # cancels toward zero has no useful relative bound; a lost step is off by 0.02).
    for got, start in ((b1, b0), (w1, w0)):
        start = np.asarray(start, np.float64)
        bound = 16 * np.finfo(np.float32).eps * (np.abs(start) + 12 * 0.01 * 2)
        np.testing.assert_array_less(np.abs(np.asarray(got) - (start - 12 * 0.01 * 2)), bound)


@pytest.mark.parametrize("kind", ["optax", "class"])
def test_two_trainers_optimizers_stepping_one_owners_parameters_at_once_lose_no_update(kind):
    """Each trainer of a parameter server makes its own DistributedOptimizer over the
    server's parameters; their steps on the owner are serialised with each other (torch's
    one lock per worker for all its local optimizers), so no update is lost."""
    m = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    prefs = m.remote_parameters()
    if kind == "optax":
        opts = [DistributedOptimizer(optax.sgd(0.01), prefs) for _ in range(2)]
    else:
        opts = [DistributedOptimizer(optim.SGD, prefs, lr=0.01) for _ in range(2)]
    _, b0 = _values(prefs)
    errors = []

    def steps(opt):
        try:
            for _ in range(6):
                with dist_autograd.context() as c:
                    dist_autograd.backward(c, [m(tp.ones(2, 4)).sum()])
                    opt.step(c)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=steps, args=(opts[i % 2],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    _, b1 = _values(prefs)
    # d(sum(x W^T + b))/db is the batch size, 2, whatever W is: 24 steps of 0.02 each; a
    # lost step is off by 0.02
    start = np.asarray(b0, np.float64)
    bound = 16 * np.finfo(np.float32).eps * (np.abs(start) + 24 * 0.01 * 2)
    np.testing.assert_array_less(np.abs(np.asarray(b1) - (start - 24 * 0.01 * 2)), bound)


def test_the_optimizer_travels_over_rpc_and_shares_owner_state():
    m = RemoteModule("worker1", tp.nn.Linear, (4, 3))
    prefs = m.remote_parameters()
    opt = DistributedOptimizer(optax.sgd(0.5, momentum=0.9), prefs)
    _, b0 = _values(prefs)
    assert rpc.rpc_sync("worker2", T.train_one, args=(m, opt, tp.ones(1, 4)))
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [m(tp.ones(1, 4)).sum()])
        opt.step(ctx)
    _, b2 = _values(prefs)
    # momentum: step 1 moves by 0.5, step 2 by 0.5 * (0.9 + 1)
    np.testing.assert_allclose(np.asarray(b2), np.asarray(b0) - 0.5 - 0.5 * 1.9, rtol=1e-5)
    assert "worker1" in repr(opt)


def test_an_error_on_an_owner_reraises_here_naming_the_worker():
    m = RemoteModule("worker2", tp.nn.Linear, (4, 3))
    opt = DistributedOptimizer(T.failing_transform(), m.remote_parameters())
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [m(_x()).sum()])
        words = ["Error running optimizer on worker worker2:", "update exploded"]
        e = expect(RuntimeError, words, opt.step, ctx)
    assert isinstance(e.__cause__, ValueError), repr(e.__cause__)


def test_step_with_an_unknown_context_raises_naming_the_worker():
    m = RemoteModule("worker2", tp.nn.Linear, (4, 3))
    opt = DistributedOptimizer(optax.sgd(0.1), m.remote_parameters())
    words = [
        "Error running optimizer on worker worker2:",
        "Could not find autograd context with id",
    ]
    expect(RuntimeError, words, opt.step, 12345)


def test_step_needs_an_int_context_id():
    prefs = RemoteModule("worker1", tp.nn.Linear, (4, 3)).remote_parameters()
    expect(
        TypeError,
        ["context_id must be the int"],
        DistributedOptimizer(optax.sgd(0.1), prefs).step,
        "ctx",
    )


@pytest.mark.parametrize(
    "args, exc, words",
    [
        ("float", TypeError, ["optax.GradientTransformation"]),
        ("kwargs-with-a-transform", TypeError, ["extra arguments are for an optimizer class"]),
        ("torch-class", TypeError, ["torch's SGD; use tensorplay_jax.optim.SGD"]),
        ("class-with-a-bad-lr", ValueError, ["SGD: invalid lr=-1"]),
        ("empty", TypeError, ["params_rref is empty"]),
        ("tensors", TypeError, ["must hold RRefs", "Tensor"]),
        (
            "rref-to-a-list",
            RuntimeError,
            ["Error creating optimizer on worker worker1:", "not a Tensor"],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_constructor_errors(args, exc, words):
    prefs = RemoteModule("worker1", tp.nn.Linear, (4, 3)).remote_parameters()
    if args == "torch-class":
        torch = pytest.importorskip("torch", reason="the mistake needs torch's class")
        expect(exc, words, DistributedOptimizer, torch.optim.SGD, prefs, lr=0.1)
        return
    if args == "class-with-a-bad-lr":  # raised here, before any owner is asked
        expect(exc, words, DistributedOptimizer, optim.SGD, prefs, lr=-1)
        return
    if args == "kwargs-with-a-transform":
        expect(exc, words, DistributedOptimizer, optax.sgd(0.1), prefs, lr=0.1)
        return
    tx, params = {
        "float": (0.1, prefs),
        "empty": (optax.sgd(0.1), []),
        "tensors": (optax.sgd(0.1), [tp.ones(2)]),
        "rref-to-a-list": (optax.sgd(0.1), [rpc.remote("worker1", NT.not_a_module)]),
    }[args]
    expect(exc, words, DistributedOptimizer, tx, params)
