"""Each optimizer against torch's on the same parameters and gradients, over several steps.

torch is the oracle (``PYTHONPATH=/tmp/torchlib``); without it these skip, and
``test_optimizer.py``'s NumPy oracles still check SGD, Adadelta, Rprop and Adamax. Tolerances are
float32 rounding: torch computes bias corrections in double, we in float32.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import optim

torch = pytest.importorskip("torch", reason="torch is the oracle (PYTHONPATH=/tmp/torchlib)")

STEPS = 4
SHAPES = [(3,), (2, 2)]

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "maximize": True}),
    ("Adam", {"lr": 0.1}),
    ("Adam", {"lr": 0.1, "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.1, "betas": (0.8, 0.9), "eps": 1e-6, "maximize": True}),
    ("AdamW", {"lr": 0.1}),
    ("AdamW", {"lr": 0.1, "weight_decay": 0.1, "amsgrad": True}),
    ("RMSprop", {"lr": 0.1}),
    ("RMSprop", {"lr": 0.1, "momentum": 0.9, "centered": True, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.1, "alpha": 0.9, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    (
        "Adagrad",
        {"lr": 0.1, "lr_decay": 0.1, "weight_decay": 0.1, "initial_accumulator_value": 0.5},
    ),
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-4, "weight_decay": 0.1}),
    ("Adadelta", {"lr": 2.0, "maximize": True}),
    ("Rprop", {}),
    ("Rprop", {"lr": 0.1, "etas": (0.3, 1.5), "step_sizes": (0.02, 0.2)}),
    ("Rprop", {"lr": 0.05, "maximize": True}),
    ("Adamax", {}),
    ("Adamax", {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-4, "weight_decay": 0.1}),
    ("Adamax", {"lr": 0.05, "weight_decay": 0.1, "maximize": True}),
]


def _data(seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    return start, grads


def _ours(name, kwargs, start, grads):
    ps = [tp.nn.Parameter(tp.tensor(v)) for v in start]
    opt = getattr(optim, name)(ps, **kwargs)
    for gs in grads:
        for p, g in zip(ps, gs, strict=True):
            p.grad = tp.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in ps], opt


def _torch(name, kwargs, start, grads):
    ps = [torch.nn.Parameter(torch.tensor(v)) for v in start]
    opt = getattr(torch.optim, name)(ps, **kwargs)
    for gs in grads:
        for p, g in zip(ps, gs, strict=True):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in ps], opt


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=lambda c: str(c))
def test_steps_match_torch(name, kwargs):
    start, grads = _data()
    got, _ = _ours(name, kwargs, start, grads)
    want, _ = _torch(name, kwargs, start, grads)
    for g, w, s in zip(got, want, start, strict=True):
        assert np.abs(w - s).max() > 1e-3  # the steps moved the parameter
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=f"{name} {kwargs}")


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("Adam", {"lr": 0.1, "amsgrad": True}),
        ("Adadelta", {"lr": 0.5, "rho": 0.8}),
        ("Rprop", {"lr": 0.05}),
        ("Adamax", {"lr": 0.1, "betas": (0.8, 0.99)}),
    ],
)
def test_torch_state_dict_loads_and_the_next_step_matches(name, kwargs):
    start, grads = _data(1)
    _, t_opt = _torch(name, kwargs, start, grads[:2])
    t_params = [p.detach().numpy().copy() for g in t_opt.param_groups for p in g["params"]]
    ps = [tp.nn.Parameter(tp.tensor(v)) for v in t_params]
    ours = getattr(optim, name)(ps, lr=0.5)  # the loaded groups bring lr back to 0.1
    ours.load_state_dict(t_opt.state_dict())
    t_ps = [q for gr in t_opt.param_groups for q in gr["params"]]
    for p, q, g in zip(ps, t_ps, grads[2], strict=True):
        p.grad = tp.tensor(g)
        q.grad = torch.tensor(g)
    ours.step()
    t_opt.step()
    for p, g in zip(ps, t_opt.param_groups[0]["params"], strict=True):
        np.testing.assert_allclose(p.detach().numpy(), g.detach().numpy(), rtol=2e-5, atol=2e-6)
