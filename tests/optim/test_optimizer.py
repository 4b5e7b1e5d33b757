"""The optimizer interface (torch's): NumPy oracles for SGD, Adadelta, Rprop and Adamax, torch's
defaults and state keys, param groups, lr changes, skipped parameters, zero_grad, state_dict, the
write into parameters, and errors."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import optim


def _sgd_oracle(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    """torch's documented SGD algorithm, written out in NumPy (float64)."""
    p, buf = np.asarray(p, np.float64), None
    for g in grads:
        g = np.asarray(g, np.float64) + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def _adadelta_oracle(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False):
    """torch's documented Adadelta algorithm, written out in NumPy (float64)."""
    p = np.asarray(p, np.float64)
    v, u = np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = (-1 if maximize else 1) * np.asarray(g, np.float64) + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta
    return p


def _rprop_oracle(p, grads, lr=0.01, etas=(0.5, 1.2), step_sizes=(1e-6, 50), maximize=False):
    """torch's documented Rprop algorithm, written out in NumPy (float64), element by element."""
    p = np.array(p, np.float64)
    prev, size = np.zeros_like(p), np.full_like(p, lr)
    for grad in grads:
        grad = (-1 if maximize else 1) * np.asarray(grad, np.float64)
        for i, g in enumerate(grad):
            if g * prev[i] > 0:
                size[i] *= etas[1]
            elif g * prev[i] < 0:
                size[i] *= etas[0]
                g = 0.0  # a sign change: no move this step, and no sign to compare next
            size[i] = min(max(size[i], step_sizes[0]), step_sizes[1])
            p[i] -= np.sign(g) * size[i]
            prev[i] = g
    return p


def _adamax_oracle(
    p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, maximize=False
):
    """torch's documented Adamax algorithm, written out in NumPy (float64)."""
    p = np.asarray(p, np.float64)
    m, u = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = (-1 if maximize else 1) * np.asarray(g, np.float64) + weight_decay * p
        m = betas[0] * m + (1 - betas[0]) * g
        u = np.maximum(betas[1] * u, np.abs(g) + eps)
        p = p - lr / (1 - betas[0] ** t) * m / u
    return p


def _param(values):
    return tp.nn.Parameter(tp.tensor(np.asarray(values, np.float32)))


def _grads(n, shape=(3,), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _run(opt, p, grads):
    for g in grads:
        p.grad = tp.tensor(g)
        opt.step()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"momentum": 0.9},
        {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1},
        {"momentum": 0.8, "nesterov": True, "weight_decay": 0.05},
    ],
    ids=str,
)
def test_sgd_matches_the_numpy_oracle(kwargs):
    start, grads = [1.0, -2.0, 0.5], _grads(4)
    p = _param(start)
    _run(optim.SGD([p], lr=0.1, **kwargs), p, grads)
    want = _sgd_oracle(start, grads, 0.1, **kwargs)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 0.5, "rho": 0.8, "eps": 1e-3, "weight_decay": 0.1},
        {"lr": 2.0, "maximize": True},
    ],
    ids=str,
)
def test_adadelta_matches_the_numpy_oracle(kwargs):
    start, grads = [1.0, -2.0, 0.5], _grads(5, seed=3)
    p = _param(start)
    _run(optim.Adadelta([p], **kwargs), p, grads)
    want = _adadelta_oracle(start, grads, **kwargs)
    assert np.abs(want - start).max() > 1e-3  # the steps moved the parameter
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 0.1, "etas": (0.3, 1.5), "step_sizes": (0.02, 0.2)},  # both bounds reached
        {"lr": 1.0, "step_sizes": (1e-6, 0.5)},  # lr above the maximum: cut at the first step
        {"lr": 0.05, "maximize": True},
    ],
    ids=str,
)
def test_rprop_matches_the_numpy_oracle(kwargs):
    start, grads = [1.0, -2.0, 0.5, 0.0], _grads(6, shape=(4,), seed=4)
    p = _param(start)
    _run(optim.Rprop([p], **kwargs), p, grads)
    want = _rprop_oracle(start, grads, **kwargs)
    assert np.abs(want - start).max() > 1e-3  # the steps moved the parameter
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5, atol=1e-6)


def test_rprop_a_sign_change_skips_the_step_and_shrinks_the_step_size():
    p = _param([0.0])
    opt = optim.Rprop([p], lr=0.1)
    seen = []
    for g in [1.0, -1.0, -1.0, -1.0]:
        p.grad = tp.tensor([g])
        opt.step()
        state = opt.state[p]
        seen.append((p.item(), state["step_size"].item(), state["prev"].item()))
    # 1: no previous sign, a step of lr; 2: the sign changed: the size halves, p stays, and
    # prev is 0; 3: 0 * g compares nothing: the size stays; 4: the same sign: size * 1.2
    want = [(-0.1, 0.1, 1.0), (-0.1, 0.05, 0.0), (-0.05, 0.05, -1.0), (0.01, 0.06, -1.0)]
    np.testing.assert_allclose(seen, want, rtol=1e-6)


def test_rprop_starts_its_step_sizes_at_the_first_steps_lr():
    p = _param([0.0])
    opt = optim.Rprop([p], lr=0.1)
    p.grad = tp.tensor([1.0])
    opt.step()
    opt.param_groups[0]["lr"] = 0.5  # as torch: lr only seeds the step sizes
    opt.step()
    assert opt.state[p]["step_size"].item() == pytest.approx(0.12)
    assert p.item() == pytest.approx(-0.22)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-3, "weight_decay": 0.1},
        {"lr": 0.05, "maximize": True},
        {"lr": 0.05, "weight_decay": 0.5, "maximize": True},  # the decay after the negation
    ],
    ids=str,
)
def test_adamax_matches_the_numpy_oracle(kwargs):
    start, grads = [1.0, -2.0, 0.5], _grads(5, seed=5)
    p = _param(start)
    _run(optim.Adamax([p], **kwargs), p, grads)
    want = _adamax_oracle(start, grads, **kwargs)
    assert np.abs(want - start).max() > 1e-3  # the steps moved the parameter
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5, atol=1e-6)


def test_adamax_keeps_the_larger_of_the_decayed_norm_and_the_new_gradient():
    p = _param([0.0, 0.0])
    opt = optim.Adamax([p], lr=0.1, eps=0.0)
    seen = []
    for g in ([2.0, 1.0], [1.0, 4.0]):
        p.grad = tp.tensor(g)
        opt.step()
        seen.append(opt.state[p]["exp_inf"].numpy())
    # the first element keeps 0.999 * 2 over |1|; the second takes |4| over 0.999 * 1
    np.testing.assert_allclose(seen, [[2.0, 1.0], [1.998, 4.0]], rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: optim.Adamax([p], foreach=True),
        lambda p: optim.Adamax([p], capturable=True),
        lambda p: optim.Adamax([p], differentiable=True),
        lambda p: optim.Adamax([p], 2e-3, (0.9, 0.999), 1e-8, 0, None),  # torch's foreach
    ],
    ids=["foreach", "capturable", "differentiable", "positional foreach"],
)
def test_adamax_refuses_torchs_foreach_capturable_and_differentiable(make):
    with pytest.raises(TypeError):  # not arguments here, as for the other optimizers
        make(_param([1.0]))


def test_an_lr_set_in_param_groups_takes_effect_on_the_next_step_without_a_new_program():
    traces = []

    class CountingSGD(optim.SGD):
        @staticmethod
        def _RULE(**kw):  # called eagerly (first state) and while the jitted step is traced
            if isinstance(kw["lr"], jax.core.Tracer):
                traces.append(kw)
            return optim.sgd_rule(**kw)

    start, grads = [1.0, 2.0, 3.0], _grads(4)
    p = _param(start)
    opt = CountingSGD([p], lr=0.1, momentum=0.9)
    _run(opt, p, grads[:2])
    opt.param_groups[0]["lr"] = 0.01
    _run(opt, p, grads[2:])
    # the oracle: two steps at 0.1, then two at 0.01, one momentum buffer throughout
    q, buf = np.asarray(start, np.float64), None
    for lr, g in zip([0.1, 0.1, 0.01, 0.01], grads, strict=True):
        buf = g.astype(np.float64) if buf is None else 0.9 * buf + g
        q = q - lr * buf
    np.testing.assert_allclose(p.detach().numpy(), q, rtol=1e-5, atol=1e-6)
    # first step (no buffer yet) and later steps: two structures, no program per lr
    assert len(traces) == 2, traces


def test_param_groups_keep_their_own_hyper_parameters():
    a, b = _param([1.0]), _param([1.0])
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad, b.grad = tp.ones(1), tp.ones(1)
    opt.step()
    assert (a.item(), b.item()) == pytest.approx((0.9, 0.5))
    assert opt.param_groups[1]["momentum"] == 0  # filled in from the defaults


def test_a_parameter_without_grad_is_left_alone_value_and_state():
    a, b = _param([1.0, 1.0]), _param([2.0, 2.0])
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = tp.ones(2)
    opt.step()
    assert b.tolist() == [2.0, 2.0]
    assert list(opt.state_dict()["state"]) == [0]  # b has no state
    assert a.tolist() != [1.0, 1.0]


def test_zero_grad_sets_none_or_zeros():
    p = _param([1.0, 2.0])
    opt = optim.SGD([p], lr=0.1)
    p.grad = grad = tp.ones(2)
    opt.zero_grad(set_to_none=False)
    assert grad.tolist() == [0.0, 0.0] and p.grad is grad  # in place, as torch
    opt.zero_grad()
    assert p.grad is None


def test_step_runs_the_closure_with_grad_and_returns_its_loss():
    p = _param([3.0])
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with tp.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 9.0
    assert p.item() == pytest.approx(3.0 - 0.25 * 6.0)


def test_state_dict_round_trip_continues_the_same_trajectory():
    grads = _grads(3, seed=2)
    p = _param([0.5, -0.5, 1.0])
    opt = optim.RMSprop([p], lr=0.05, momentum=0.9, centered=True)
    _run(opt, p, grads[:2])
    saved = opt.state_dict()
    q = _param(p.detach().numpy())
    restored = optim.RMSprop([q], lr=1.0)  # hyper-parameters come back from the dict
    restored.load_state_dict(saved)
    assert restored.param_groups[0]["lr"] == 0.05
    assert sorted(saved["state"][0]) == ["grad_avg", "momentum_buffer", "square_avg", "step"]
    _run(opt, p, grads[2:])
    _run(restored, q, grads[2:])
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_load_state_dict_rejects_groups_of_another_size():
    opt = optim.SGD([_param([1.0])], lr=0.1)
    other = optim.SGD([_param([1.0]), _param([2.0])], lr=0.1)
    with pytest.raises(ValueError, match="parameter group 0 has 2 parameters"):
        opt.load_state_dict(other.state_dict())


def test_a_step_is_seen_by_views_and_bumps_the_version():
    p = _param([1.0, 2.0])
    view = p.data[0:1]  # a detached view, as torch's p.data[...]
    saved = (p * p).sum()  # mul saved p's value
    p.grad = tp.ones(2)
    optim.SGD([p], lr=0.5).step()
    assert view.tolist() == [0.5]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


def test_apply_gradients_without_stale_check_leaves_earlier_graphs_usable():
    p = _param([1.0, 2.0])
    saved = (p * p).sum()  # recorded before the step, as another trainer's forward
    optim.SGD([p], lr=0.5).apply_gradients({p: tp.ones(2)}, stale_check=False)
    saved.backward()  # uses the values the forward saved
    assert p.tolist() == [0.5, 1.5] and p.grad.tolist() == [2.0, 4.0]


def test_a_gradient_of_another_dtype_keeps_the_parameter_and_state_dtype():
    p = _param([1.0, 2.0])
    opt = optim.SGD([p], lr=0.5, momentum=0.9)
    opt.apply_gradients({p: np.ones(2, np.float64)})
    assert p.dtype == np.float32 and opt.state[p]["momentum_buffer"].dtype == np.float32
    assert p.tolist() == [0.5, 1.5]


def test_parameters_on_two_devices_each_step_where_they_are():
    d0, d1 = jax.devices()[:2]
    a = tp.nn.Parameter(tp.tensor(jax.device_put(np.ones(2, np.float32), d0)))
    b = tp.nn.Parameter(tp.tensor(jax.device_put(np.ones(2, np.float32), d1)))
    opt = optim.Adam([a, b], lr=0.5)
    a.grad, b.grad = tp.ones(2), tp.ones(2)  # uncommitted: each goes to its parameter
    opt.step()
    assert a.device == d0 and b.device == d1
    np.testing.assert_allclose(a.detach().numpy(), [0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), [0.5, 0.5], rtol=1e-6)


def test_a_step_is_not_recorded():
    p = _param([1.0])
    p.grad = tp.ones(1)
    optim.SGD([p], lr=0.5).step()
    assert p.is_leaf and p.requires_grad and p.grad_fn is None


@pytest.mark.parametrize(
    ("cls", "weight_decay", "after"),
    # torch's defaults: Adam 0 (a zero gradient moves nothing); AdamW 1e-2, decoupled:
    # p * (1 - lr * weight_decay) = 1 - 0.1 * 0.01 before the (zero) Adam step
    [(optim.Adam, 0.0, 1.0), (optim.AdamW, 1e-2, 0.999)],
)
def test_adam_and_adamw_take_torchs_default_weight_decay(cls, weight_decay, after):
    w = _param([1.0])
    opt = cls([w], lr=0.1)
    assert opt.param_groups[0]["weight_decay"] == weight_decay
    w.grad = tp.zeros(1)
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), [after], rtol=1e-6)


@pytest.mark.parametrize(
    ("cls", "defaults", "keys"),
    [
        (
            optim.Adadelta,
            {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0, "maximize": False},
            ["acc_delta", "square_avg", "step"],
        ),
        (
            optim.Rprop,
            {"lr": 0.01, "etas": (0.5, 1.2), "step_sizes": (1e-6, 50), "maximize": False},
            ["prev", "step", "step_size"],
        ),
        (
            optim.Adamax,
            {
                "lr": 2e-3,
                "betas": (0.9, 0.999),
                "eps": 1e-8,
                "weight_decay": 0,
                "maximize": False,
            },
            ["exp_avg", "exp_inf", "step"],
        ),
    ],
    ids=["Adadelta", "Rprop", "Adamax"],
)
def test_torchs_defaults_and_state_keys(cls, defaults, keys):
    p = _param([1.0, -1.0])
    opt = cls([p])
    assert opt.defaults == defaults
    assert {k: opt.param_groups[0][k] for k in defaults} == defaults
    _run(opt, p, _grads(2, shape=(2,)))
    state = opt.state_dict()["state"]
    assert list(state) == [0] and sorted(state[0]) == keys
    assert state[0]["step"].item() == 2.0


def test_repr_lists_each_group():
    opt = optim.SGD([_param([1.0])], lr=0.1)
    text = repr(opt)
    assert text.startswith("SGD (\nParameter Group 0\n") and "    lr: 0.1\n" in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: optim.SGD([p], lr=-0.1), "invalid lr=-0.1"),
        (lambda p: optim.SGD([p], lr=0.1, momentum=-1), "invalid momentum=-1"),
        (lambda p: optim.SGD([p], lr=0.1, nesterov=True), "nesterov=True requires momentum"),
        (lambda p: optim.Adam([p], betas=(0.9, 1.0)), "invalid betas=(0.9, 1.0)"),
        (lambda p: optim.Adagrad([p], eps=-1.0), "invalid eps=-1.0"),
        (lambda p: optim.Adadelta([p], rho=1.5), "invalid rho=1.5"),
        (lambda p: optim.Adadelta([p], weight_decay=-0.1), "invalid weight_decay=-0.1"),
        (lambda p: optim.Rprop([p], etas=(1.5, 1.2)), "invalid etas=(1.5, 1.2)"),
        (lambda p: optim.Rprop([p], step_sizes=(0.1,)), "invalid step_sizes=(0.1,)"),
        (lambda p: optim.Rprop([p], lr=-0.1), "invalid lr=-0.1"),
        (lambda p: optim.Adamax([p], lr=-0.1), "invalid lr=-0.1"),
        (lambda p: optim.Adamax([p], eps=-1e-8), "invalid eps=-1e-08"),
        (lambda p: optim.Adamax([p], betas=(1.0, 0.999)), "invalid betas=(1.0, 0.999)"),
        (lambda p: optim.Adamax([p], betas=(0.9, -0.1)), "invalid betas=(0.9, -0.1)"),
        (lambda p: optim.Adamax([p], weight_decay=-0.1), "invalid weight_decay=-0.1"),
        (lambda p: optim.SGD([{"params": [p], "lr": -1.0}]), "invalid lr=-1.0"),
        (lambda p: optim.SGD([], lr=0.1), "empty parameter list"),
        (lambda p: optim.SGD([p * 2], lr=0.1), "params[0] is not a leaf Tensor"),
        (
            lambda p: optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1),
            "more than one parameter group",
        ),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make(_param([1.0]))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([np.ones(2)], "params[0] is a ndarray"),
        ({"a"}, "ordered iterable"),
        ("tensor", "ordered iterable"),
    ],
)
def test_bad_params_raise_type_error(params, message):
    if params == "tensor":
        params = _param([1.0])
    with pytest.raises(TypeError, match=re.escape(message)):
        optim.SGD(params, lr=0.1)
