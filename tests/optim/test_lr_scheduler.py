"""``optim.lr_scheduler``: the rates of tensorplay's schedules, and steps taken with them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import optim
from tensorplay_jax.optim import lr_scheduler as S

_CASES = {
    "StepLR": (
        lambda o: S.StepLR(o, step_size=3, gamma=0.5),
        "StepLR",
        {"step_size": 3, "gamma": 0.5},
    ),
    "MultiStepLR": (
        lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3),
        "MultiStepLR",
        {"milestones": [2, 5, 5, 9], "gamma": 0.3},
    ),
    "ExponentialLR": (lambda o: S.ExponentialLR(o, gamma=0.9), "ExponentialLR", {"gamma": 0.9}),
    "LinearLR": (
        lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=4),
        "LinearLR",
        {"start_factor": 0.25, "end_factor": 0.75, "total_iters": 4},
    ),
    "CosineAnnealingLR": (
        lambda o: S.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
        "CosineAnnealingLR",
        {"T_max": 4, "eta_min": 0.01},
    ),
    "LambdaLR": (
        lambda o: S.LambdaLR(o, lr_lambda=[lambda e: 0.95**e, lambda e: 1 / (e + 1)]),
        "LambdaLR",
        {"lr_lambda": [lambda e: 0.95**e, lambda e: 1 / (e + 1)]},
    ),
}


def _two_groups():
    a, b = tp.zeros(2, requires_grad=True), tp.zeros(3, requires_grad=True)
    return optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.4}], lr=0.1)


def _rates(make, epochs=14):
    opt = _two_groups()
    sched = make(opt)
    rates = [sched.get_last_lr()]
    for _ in range(epochs):
        opt.step()
        sched.step()
        rates.append(sched.get_last_lr())
    return rates


@pytest.mark.parametrize("name", list(_CASES))
def test_a_schedule_gives_tensorplays_rates(name):
    torch = pytest.importorskip("torch", reason="torch is the oracle (PYTHONPATH=/tmp/torchlib)")
    make, cls, kwargs = _CASES[name]
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    topt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.4}], lr=0.1)
    tsched = getattr(torch.optim.lr_scheduler, cls)(topt, **kwargs)
    want = [tsched.get_last_lr()]
    for _ in range(14):
        topt.step()
        tsched.step()
        want.append(tsched.get_last_lr())
    np.testing.assert_allclose(_rates(make), want, rtol=1e-15, atol=0)


def test_step_lr_follows_its_closed_form():
    rates = [r[0] for r in _rates(_CASES["StepLR"][0])]
    assert rates == pytest.approx([0.1 * 0.5 ** (e // 3) for e in range(15)], rel=1e-12)


def test_cosine_annealing_follows_its_closed_form_over_one_half_period():
    rates = [r[1] for r in _rates(_CASES["CosineAnnealingLR"][0], epochs=4)]
    closed = [0.01 + (0.4 - 0.01) * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)]
    assert rates == pytest.approx(closed, rel=1e-12)


def test_sgd_steps_with_the_scheduled_rate():
    w = tp.tensor([1.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    sched = S.ExponentialLR(opt, gamma=0.5)
    for _ in range(3):
        opt.zero_grad()
        (w * 2.0).sum().backward()  # d/dw = 2
        opt.step()
        sched.step()
    assert w.item() == pytest.approx(1.0 - 2 * (0.5 + 0.25 + 0.125))


def test_a_state_dict_resumes_the_schedule():
    opt = _two_groups()
    sched = S.StepLR(opt, step_size=2, gamma=0.1)
    for _ in range(3):
        sched.step()
    saved, opt_state = sched.state_dict(), opt.state_dict()
    opt2 = _two_groups()
    opt2.load_state_dict(opt_state)
    resumed = S.StepLR(opt2, step_size=2, gamma=0.1)
    resumed.load_state_dict(saved)
    sched.step()
    resumed.step()
    assert resumed.get_last_lr() == sched.get_last_lr() and resumed.last_epoch == 4


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: S.StepLR(object(), step_size=1), TypeError, "is not a tensorplay_jax.optim"),
        (lambda: S.StepLR(_two_groups(), step_size=0), ValueError, "step_size must be"),
        (lambda: S.LinearLR(_two_groups(), start_factor=0.0), ValueError, "start_factor"),
        (lambda: S.LambdaLR(_two_groups(), [lambda e: 1.0]), ValueError, "expected 2 lr_lambdas"),
        (lambda: S.StepLR(_two_groups(), step_size=2, last_epoch=3), KeyError, "initial_lr"),
    ],
    ids=["not-an-optimizer", "step-size", "start-factor", "lambdas", "resume-without-initial-lr"],
)
def test_bad_arguments_raise_naming_them(make, error, words):
    with pytest.raises(error, match=words):
        make()
