"""Learning-rate schedules for ``tensorplay_jax.optim`` (tensorplay's ``optim.lr_scheduler``).

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

import collections
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "StepLR",
]


class LRScheduler:
    """Base class: ``step()`` advances ``last_epoch`` and writes ``get_lr()`` into the groups.

    Args:
        optimizer: a ``tensorplay_jax.optim`` optimizer.
        last_epoch: the index of the last epoch done; -1 starts afresh (each group's
            ``initial_lr`` is set to its ``lr``), a larger value resumes, and then every
            group must already hold ``initial_lr`` (from the optimizer's ``state_dict``).

    Raises:
        TypeError: ``optimizer`` is not a ``tensorplay_jax.optim.Optimizer``.
        KeyError: resuming (``last_epoch >= 0``) and a group has no ``initial_lr``.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: {type(optimizer).__name__} is not a "
                "tensorplay_jax.optim Optimizer (e.g. tensorplay_jax.optim.SGD)"
            )
        self.optimizer = optimizer
        groups = optimizer.param_groups
        if last_epoch == -1:
            for group in groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"{type(self).__name__}: param 'initial_lr' is not specified in "
                        f"param_groups[{i}] when resuming with last_epoch={last_epoch}; load "
                        "the optimizer's state_dict first, or pass last_epoch=-1"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The rate of each group for epoch ``last_epoch`` (subclasses define it)."""
        raise NotImplementedError

    def _current(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        """Advance one epoch and set each group's ``lr`` to its new rate."""
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = self._current()

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state (every attribute but the optimizer)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.__dict__.update(state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self._last_lr})"


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
        n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        if isinstance(lr_lambda, list | tuple):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        pairs = zip(self.lr_lambdas, self.base_lrs, strict=True)
        return [base * f(self.last_epoch) for f, base in pairs]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.pop("lr_lambdas")
        return state


def _positive_int(cls: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{cls}: {name} must be a positive int, got {value!r}")
    return value


class StepLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current()
        return [lr * self.gamma for lr in self._current()]


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


class ExponentialLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._current()
        return [lr * self.gamma for lr in self._current()]


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
        self.total_iters = _positive_int("LinearLR", "total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._current()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current()
        delta = self.end_factor - self.start_factor
        ratio = 1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta)
        return [lr * ratio for lr in self._current()]


class CosineAnnealingLR(LRScheduler):
    """Anneal each rate from its initial value to ``eta_min`` along a cosine (period 2 T_max)."""

    def __init__(
        self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
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
