"""Learning-rate schedules for ``tensorplay_jax.optim`` (tensorplay's ``optim.lr_scheduler``).

The epoch-driven schedules are here; the base class is ``_lr_base``, the cyclic ones
(``CosineAnnealingWarmRestarts``, ``OneCycleLR``) ``_lr_cycles``, ``ReduceLROnPlateau``
``_lr_plateau`` and the combinations (``SequentialLR``, ``ChainedScheduler``)
``_lr_combined``; this module is where users import all of them from.

A scheduler writes ``group["lr"]`` of its optimizer's param groups; the optimizer
reads it at its next ``step()`` without compiling again. Call ``scheduler.step()``
after ``optimizer.step()``, once per epoch (or per iteration), as in tensorplay.
Each schedule computes the next rate from the current one by tensorplay's own
recurrences, so two schedulers on one optimizer compose as they do there.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax import optim
    >>> opt = optim.SGD(tp.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> rates = []
    >>> for epoch in range(5):
    ...     opt.step()  # no gradients yet: nothing moves
    ...     sched.step()
    ...     rates.append(sched.get_last_lr()[0])
    >>> rates
    [0.1, 0.05, 0.05, 0.025, 0.025]
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tensorplay_jax.optim._lr_base import LRScheduler, positive_int
from tensorplay_jax.optim._lr_combined import ChainedScheduler, SequentialLR
from tensorplay_jax.optim._lr_cycles import CosineAnnealingWarmRestarts, OneCycleLR
from tensorplay_jax.optim._lr_plateau import ReduceLROnPlateau
from tensorplay_jax.optim._optimizer import Optimizer

__all__ = [
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
]


def _lambdas(cls: str, optimizer: Any, lr_lambda: Any) -> list[Callable[[int], float]]:
    """One function per param group: the list given, or the one function for each."""
    n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
    if isinstance(lr_lambda, list | tuple):
        if len(lr_lambda) != n:
            raise ValueError(f"{cls}: expected {n} lr_lambdas, but got {len(lr_lambda)}")
        return list(lr_lambda)
    return [lr_lambda] * n


def _state_without_lambdas(self: LRScheduler) -> dict[str, Any]:
    """The state of a schedule of functions, without them (they may not be picklable)."""
    state = LRScheduler.state_dict(self)
    state.pop("lr_lambdas")
    return state


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``, one function for all groups or one per group.

    Functions are not part of :meth:`state_dict` (they may not be picklable): a loaded
    scheduler keeps its own.

    Raises:
        ValueError: a list of functions whose length is not the number of groups.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        self.lr_lambdas = _lambdas("LambdaLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        pairs = zip(self.lr_lambdas, self.base_lrs, strict=True)
        return [base * f(self.last_epoch) for f, base in pairs]

    state_dict = _state_without_lambdas


class StepLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.step_size = positive_int("StepLR", "step_size", step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current()
        return [lr * self.gamma for lr in self._current()]

    def _closed_form(self) -> list[float]:
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` at each epoch of ``milestones``."""

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Iterable[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.milestones = collections.Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        times = self.milestones.get(self.last_epoch, 0)
        if not times:
            return self._current()
        return [lr * self.gamma**times for lr in self._current()]

    def _closed_form(self) -> list[float]:
        times = bisect.bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [b * self.gamma**times for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._current()
        return [lr * self.gamma for lr in self._current()]

    def _closed_form(self) -> list[float]:
        return [b * self.gamma**self.last_epoch for b in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the rate linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs.

    Raises:
        ValueError: ``start_factor`` not in (0, 1], ``end_factor`` not in [0, 1], or
            ``total_iters`` not a positive int.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 < start_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = positive_int("LinearLR", "total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._current()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current()
        delta = self.end_factor - self.start_factor
        ratio = 1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta)
        return [lr * ratio for lr in self._current()]

    def _closed_form(self) -> list[float]:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * done
        return [b * factor for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal each rate from its initial value to ``eta_min`` along a cosine (period 2 T_max)."""

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        self.T_max = positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, period, low = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._current()
        if self._step_count == 1 and t > 0:  # the closed form
            rise = 1 + math.cos(t * math.pi / period)  # the products in tensorplay's order
            return [low + (b - low) * rise / 2 for b in self.base_lrs]
        current = self._current()
        if (t - 1 - period) % (2 * period) == 0:
            rise = 1 - math.cos(math.pi / period)
            return [lr + (b - low) * rise / 2 for lr, b in zip(current, self.base_lrs, strict=True)]
        ratio = (1 + math.cos(math.pi * t / period)) / (1 + math.cos(math.pi * (t - 1) / period))
        return [ratio * (lr - low) + low for lr in current]

    def _closed_form(self) -> list[float]:
        rise = 1 + math.cos(math.pi * self.last_epoch / self.T_max)
        return [self.eta_min + (b - self.eta_min) * rise / 2 for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply each rate by ``factor`` until epoch ``total_iters``, then restore it.

    Raises:
        ValueError: ``factor`` outside [0, 1].
    """

    def __init__(
        self,
        optimizer: Optimizer,
        factor: float = 1.0 / 3,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 <= factor <= 1:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._current()]
        if self.last_epoch != self.total_iters:
            return self._current()
        return [lr * (1.0 / self.factor) for lr in self._current()]

    def _closed_form(self) -> list[float]:
        factor = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [b * factor for b in self.base_lrs]


class MultiplicativeLR(LRScheduler):
    """Multiply each rate by ``lr_lambda(epoch)`` every epoch (one function, or one per
    group); the functions are not part of :meth:`state_dict`.

    Raises:
        ValueError: a list of functions whose length is not the number of groups.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        self.lr_lambdas = _lambdas("MultiplicativeLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch > 0:
            pairs = zip(self.lr_lambdas, self._current(), strict=True)
            return [lr * f(self.last_epoch) for f, lr in pairs]
        return self._current()

    state_dict = _state_without_lambdas


class PolynomialLR(LRScheduler):
    """Decay each rate to 0 over ``total_iters`` epochs: ``(1 - epoch / total_iters) ** power``
    times the initial rate."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_iters: int = 5,
        power: float = 1.0,
        last_epoch: int = -1,
    ) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t = self.last_epoch
        if self._is_initial or t == 0 or t > self.total_iters:
            return self._current()
        decay = ((1.0 - t / self.total_iters) / (1.0 - (t - 1) / self.total_iters)) ** self.power
        return [lr * decay for lr in self._current()]

    def _closed_form(self) -> list[float]:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        return [b * (1.0 - done) ** self.power for b in self.base_lrs]
