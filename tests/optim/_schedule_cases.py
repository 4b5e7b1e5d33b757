"""Learning-rate schedules written once for torch and for tensorplay_jax: torch is the
oracle. Each case makes a scheduler from the module ``S`` (``torch.optim.lr_scheduler``
or ours) on a two-group optimizer, and :func:`trajectory` records each group's rate
(and the first group's momentum or first beta) after construction and after each step.
``golden/make_schedules_golden.py`` stores torch's trajectories in
``golden/torch_schedules.npz``; ``test_schedules_parity.py`` compares ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class Case(NamedTuple):
    make: Callable[[Any, Any], Any]  # (S, optimizer) -> scheduler
    optimizer: str = "sgd"  # "sgd" (momentum 0.9) or "adam"
    steps: int = 14
    metrics: tuple[float, ...] = ()  # ReduceLROnPlateau's step arguments


_LOSSES = (5.0, 4.0, 4.0, 3.999, 4.2, 4.1, 4.0, 3.0, 3.0, 3.0, 3.0, 3.0, 2.0, 2.0)

CASES: dict[str, Case] = {
    "ConstantLR": Case(lambda S, o: S.ConstantLR(o, factor=0.25, total_iters=4)),
    "MultiplicativeLR": Case(lambda S, o: S.MultiplicativeLR(o, lambda e: 0.9 if e % 2 else 0.8)),
    "PolynomialLR": Case(lambda S, o: S.PolynomialLR(o, total_iters=6, power=2.0)),
    "CosineAnnealingWarmRestarts": Case(
        lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01), steps=20
    ),
    "CosineAnnealingWarmRestarts_fixed": Case(lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=4)),
    "OneCycleLR_sgd": Case(lambda S, o: S.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=15)),
    "OneCycleLR_adam_linear_three_phase": Case(
        lambda S, o: S.OneCycleLR(
            o, max_lr=0.5, epochs=3, steps_per_epoch=5, anneal_strategy="linear", three_phase=True
        ),
        optimizer="adam",
    ),
    "ReduceLROnPlateau": Case(
        lambda S, o: S.ReduceLROnPlateau(o, patience=2, factor=0.5, cooldown=1, min_lr=0.02),
        metrics=_LOSSES,
    ),
    "ReduceLROnPlateau_max_abs": Case(
        lambda S, o: S.ReduceLROnPlateau(
            o, mode="max", patience=1, threshold=0.5, threshold_mode="abs"
        ),
        metrics=tuple(-v for v in _LOSSES),
    ),
    "SequentialLR_warmup_cosine": Case(
        lambda S, o: S.SequentialLR(
            o,
            [S.LinearLR(o, start_factor=0.1, total_iters=3), S.CosineAnnealingLR(o, T_max=8)],
            milestones=[3],
        )
    ),
    "SequentialLR_three": Case(
        lambda S, o: S.SequentialLR(
            o,
            [
                S.ConstantLR(o, factor=0.5, total_iters=2),
                S.ExponentialLR(o, gamma=0.9),
                S.StepLR(o, step_size=2, gamma=0.5),
            ],
            milestones=[2, 6],
        )
    ),
    "ChainedScheduler": Case(
        lambda S, o: S.ChainedScheduler(
            [S.ConstantLR(o, factor=0.5, total_iters=3), S.ExponentialLR(o, gamma=0.9)]
        )
    ),
}


def trajectory(lib: Any, case: Case) -> np.ndarray:
    """``(steps + 1, 3)``: both groups' rates and the first group's momentum (or first beta)
    after construction and after each step, with the library ``lib`` (torch or ours)."""
    a, b = lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)
    groups = [{"params": [a]}, {"params": [b], "lr": 0.4}]
    if case.optimizer == "adam":
        opt = lib.optim.Adam(groups, lr=0.1)
    else:
        opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9)
    sched = case.make(lib.optim.lr_scheduler, opt)

    def row() -> list[float]:
        g = opt.param_groups
        m = g[0]["betas"][0] if "betas" in g[0] else g[0]["momentum"]
        return [g[0]["lr"], g[1]["lr"], m]

    rows = [row()]
    for i in range(case.steps):
        opt.step()
        if case.metrics:
            sched.step(case.metrics[i])
        else:
            sched.step()
        rows.append(row())
    return np.array(rows, np.float64)
