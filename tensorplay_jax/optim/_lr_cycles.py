"""Cyclic learning-rate schedules: ``CosineAnnealingWarmRestarts`` (SGDR) and ``OneCycleLR``
(which cycles the momentum, or Adam's first beta, against the rate), as torch's."""

from __future__ import annotations

import math
from typing import Any

from tensorplay_jax.optim._lr_base import LRScheduler, positive_int
from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["CosineAnnealingWarmRestarts", "OneCycleLR"]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from each initial rate to ``eta_min`` over ``T_0`` epochs, then a
    restart; each period ``T_mult`` times the one before. ``step(epoch)`` may take a
    fractional epoch (a step within an epoch), as torch's.

    Raises:
        ValueError: ``T_0`` not a positive int, ``T_mult`` not an int >= 1, or a negative
            epoch.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        T_0: int,
        T_mult: int = 1,
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        self.T_0 = positive_int("CosineAnnealingWarmRestarts", "T_0", T_0)
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        rise = 1 + math.cos(math.pi * self.T_cur / self.T_i)
        return [self.eta_min + (b - self.eta_min) * rise / 2 for b in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch (or go to ``epoch``) and set each group's rate."""
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult**n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = self._current()


def _per_group(name: str, value: Any, n: int) -> list[float]:
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name}, got {len(value)}")
        return list(value)
    return [value] * n


class OneCycleLR(LRScheduler):
    """The 1cycle policy: each rate rises from ``max_lr / div_factor`` to ``max_lr`` over the
    first ``pct_start`` of ``total_steps``, then falls to ``initial / final_div_factor``
    (``three_phase``: back to the initial rate first), along a cosine or a line; the
    momentum (or Adam's first beta) moves the other way between ``max_momentum`` and
    ``base_momentum``. Step it once per batch.

    Raises:
        ValueError: no way to count the steps, a bad ``pct_start`` or ``anneal_strategy``,
            ``cycle_momentum`` with an optimizer that has no momentum, or a step past
            ``total_steps``.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | list[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | list[float] = 0.85,
        max_momentum: float | list[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(
                    f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}"
                )
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not 0 <= pct_start <= 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self.anneal_strategy, self.cycle_momentum = anneal_strategy, cycle_momentum
        end = self.total_steps - 1
        up = float(pct_start * self.total_steps) - 1
        if three_phase:
            self._phases = [
                (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (
                    float(2 * pct_start * self.total_steps) - 2,
                    "max_lr",
                    "initial_lr",
                    "base_momentum",
                    "max_momentum",
                ),
                (end, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (end, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        groups = optimizer.param_groups if isinstance(optimizer, Optimizer) else []
        n = len(groups)
        if last_epoch == -1:
            for group, top in zip(groups, _per_group("max_lr", max_lr, n), strict=True):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        if cycle_momentum:
            defaults = getattr(optimizer, "defaults", {})
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError(
                    "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"
                )
            self._use_beta1 = "betas" in defaults
            if last_epoch == -1:
                highs = _per_group("max_momentum", max_momentum, n)
                lows = _per_group("base_momentum", base_momentum, n)
                for group, high, low in zip(groups, highs, lows, strict=True):
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self._use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"Tried to step {step} times. The specified number of total steps is "
                f"{self.total_steps}"
            )
        rates = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    rates.append(self._anneal(group[lr0], group[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                start = end
        return rates
