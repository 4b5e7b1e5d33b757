"""The speed-up layer against the reference path: the same programs, the same numbers.

Each program runs twice from the same start: with the speed-up layer
(``autograd.speedups``: deferred segments, segment programs, fused and known
backwards, NumPy on small CPU arrays) and with ``set_deferred(False)`` (the core
tape alone: each operation at once, each backward node by node). Enough steps run
that the layer's compiled programs take over (``FUSE_AFTER``). Values and
gradients agree to float32 rounding: the layer runs the same operations, but XLA
may fuse a multiply and an add into one rounding, or sum in another order, when
several operations compile as one program. The stated tolerance is
``rtol=1e-5, atol=1e-5``: the differences stay within tens of float32 ulps over
these steps (Adam's normalised updates carry a last-bit difference into the next
step's parameters).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.nn as nn
import tensorplay_jax.optim as optim
from tensorplay_jax.autograd import attach_outputs, make_node, run_backward, set_deferred
from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER

RTOL, ATOL = 1e-5, 1e-5
STEPS = FUSE_AFTER + 4  # the later steps run through the layer's compiled programs

Program = Callable[[], Callable[[], list[np.ndarray]]]


def _run(make: Program, deferred: bool) -> list[list[np.ndarray]]:
    old = set_deferred(deferred)
    try:
        step = make()
        return [step() for _ in range(STEPS)]
    finally:
        set_deferred(old)


def _same(make: Program) -> None:
    layer, reference = _run(make, True), _run(make, False)
    for k, (got, want) in enumerate(zip(layer, reference, strict=True)):
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"step {k}, value {i}")


def test_the_reference_path_defers_nothing() -> None:
    old = set_deferred(False)
    try:
        w = tp.ones(3, requires_grad=True)
        y = (w * 2.0).sum()
        assert not tp.autograd.is_pending(y)
        assert y.grad_fn.lazy is None
    finally:
        set_deferred(old)


def _layer_programs() -> int:
    c = tp.autograd.trace_counts()
    names = ("<fused forward>", "<fused backward>", "<fused forward-backward>")
    return sum(c.get(name, 0) for name in names)


def test_the_reference_path_compiles_none_of_the_layers_programs() -> None:
    rng = np.random.default_rng(4)
    x = tp.tensor(rng.standard_normal((37, 41)).astype(np.float32))  # shapes new to the process
    w = tp.tensor(rng.standard_normal((41, 43)).astype(np.float32), requires_grad=True)
    before = _layer_programs()
    old = set_deferred(False)
    try:
        for _ in range(STEPS):  # a recurring step: the layer would compile its backward
            w.grad = None
            (x @ w).tanh().sum().backward()
    finally:
        set_deferred(old)
    assert _layer_programs() == before
    g = 1 - np.tanh(x.numpy() @ w.numpy()) ** 2
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ g, rtol=1e-4, atol=1e-4)


def _eager_step() -> Callable[[], list[np.ndarray]]:
    """benchmarks/eager.py's step: ``(x @ w).relu().sum().backward()``, x 32x64, w 64x64."""
    rng = np.random.default_rng(0)
    x = tp.tensor(rng.standard_normal((32, 64)).astype(np.float32))
    w = tp.tensor(rng.standard_normal((64, 64)).astype(np.float32), requires_grad=True)

    def step() -> list[np.ndarray]:
        w.grad = None
        loss = (x @ w).relu().sum()
        loss.backward()
        return [loss.numpy(), w.grad.numpy()]

    return step


def test_the_eager_benchmark_step() -> None:
    _same(_eager_step)


def _pipeline_stage() -> Callable[[], list[np.ndarray]]:
    """A two-stage pipeline's second stage: ``x`` arrives from stage one (a recv node with no
    inputs, whose backward hands the gradient back), the stage runs ``2 tanh(x @ w) + b``
    and its output's gradient comes from downstream."""
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(STEPS)]
    cts = [rng.standard_normal((4, 9)).astype(np.float32) for _ in range(STEPS)]
    w = tp.tensor((0.3 * rng.standard_normal((6, 9))).astype(np.float32), requires_grad=True)
    b = tp.tensor(np.zeros(9, np.float32), requires_grad=True)
    k = iter(range(STEPS))

    def step() -> list[np.ndarray]:
        i = next(k)
        sent_back: list[np.ndarray] = []

        def recv_backward(grads: tuple) -> tuple:
            sent_back.append(np.asarray(grads[0]))
            return ()

        recv = make_node(recv_backward, name="RecvRpcBackward")
        (x,) = attach_outputs(recv, [xs[i]])
        out = (x @ w).tanh() * 2.0 + b
        grads: dict = {}
        run_backward([out], [cts[i]], accumulate=lambda t, g: grads.__setitem__(t, g))
        return [out.numpy(), sent_back[0], np.asarray(grads[w]), np.asarray(grads[b])]

    return step


def test_a_pipeline_stage_forward_and_backward() -> None:
    _same(_pipeline_stage)


def _changing_graph() -> Callable[[], list[np.ndarray]]:
    """The RL tutorial's update (examples/tutorials/rpc_rl.py): a policy's log-probabilities
    over an episode whose length changes every step, weighted by normalised returns."""
    rng = np.random.default_rng(5)
    lengths = [3, 5, 2, 5, 7, 3, 4, 6, 2][:STEPS]
    episodes = [
        (
            rng.standard_normal((n, 4)).astype(np.float32),
            rng.integers(0, 2, n),
            rng.standard_normal(n).astype(np.float32),
        )
        for n in lengths
    ]
    tp.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = optim.Adam(policy.parameters(), lr=1e-2)
    k = iter(range(STEPS))

    def step() -> list[np.ndarray]:
        states, actions, rewards = episodes[next(k)]
        log_probs = []
        for s, a in zip(states, actions, strict=True):  # one action at a time, as it is chosen
            probs = tp.softmax(policy(tp.tensor(s)), dim=-1)
            log_probs.append(probs[int(a)].log().reshape(1))
        returns, big_r = [], 0.0
        for r in rewards[::-1]:
            big_r = float(r) + 0.99 * big_r
            returns.insert(0, big_r)
        ret = tp.tensor(np.asarray(returns, np.float32))
        ret = (ret - ret.mean()) / (ret.std() + 1e-6)
        loss = (-tp.cat(log_probs) * ret).sum()
        opt.zero_grad()
        loss.backward()
        grads = [p.grad.numpy() for p in policy.parameters()]
        opt.step()
        return [loss.numpy(), *grads, *(p.numpy() for p in policy.parameters())]

    return step


def test_a_graph_that_changes_every_step() -> None:
    _same(_changing_graph)


def _mlp_training() -> Callable[[], list[np.ndarray]]:
    """The first steps of a small MLP's training: cross-entropy, SGD with momentum."""
    rng = np.random.default_rng(2)
    x = tp.tensor(rng.standard_normal((16, 5)).astype(np.float32))
    y = tp.tensor(rng.integers(0, 3, 16))
    tp.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> list[np.ndarray]:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return [loss.numpy(), *(p.numpy() for p in model.parameters())]

    return step


def test_small_mlp_training_steps() -> None:
    _same(_mlp_training)


@pytest.mark.parametrize("program", [_eager_step, _mlp_training], ids=["eager", "mlp"])
def test_a_cleared_layer_gives_the_same_numbers(program: Program) -> None:
    from tensorplay_jax.autograd import speedups

    before = _run(program, True)
    speedups.clear()
    after = _run(program, True)
    for got, want in zip(after, before, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
