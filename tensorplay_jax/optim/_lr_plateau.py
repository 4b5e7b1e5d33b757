"""``ReduceLROnPlateau``: lower the rates when a metric stops improving, as torch's."""

from __future__ import annotations

import math
from typing import Any

from tensorplay_jax.optim._lr_base import LRScheduler
from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["ReduceLROnPlateau"]


class ReduceLROnPlateau(LRScheduler):
    """Multiply each rate by ``factor`` (not below ``min_lr``) when the metric passed to
    ``step(metric)`` has not improved for more than ``patience`` epochs, then wait
    ``cooldown`` epochs. Improving means beating the best value by ``threshold``
    (relative, or absolute with ``threshold_mode="abs"``), downwards for ``mode="min"``.

    Example:
        >>> import tensorplay_jax as tp
        >>> opt = tp.optim.SGD(tp.nn.Linear(2, 1).parameters(), lr=1.0)
        >>> sched = ReduceLROnPlateau(opt, patience=1, factor=0.5)
        >>> for loss in [3.0, 2.0, 2.0, 2.0, 2.0, 2.0]:
        ...     sched.step(loss)
        >>> sched.get_last_lr()
        [0.25]

    Raises:
        ValueError: ``factor`` not below 1, an unknown ``mode`` or ``threshold_mode``, or a
            list of ``min_lr`` of the wrong length.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | list[float] = 0,
        eps: float = 1e-8,
    ) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        n = len(optimizer.param_groups)
        if isinstance(min_lr, list | tuple):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
            self.min_lrs = [float(v) for v in min_lr]
        else:
            self.min_lrs = [float(min_lr)] * n
        self.optimizer, self.factor, self.patience = optimizer, factor, patience
        self.threshold, self.threshold_mode, self.mode = threshold, threshold_mode, mode
        self.cooldown, self.eps = cooldown, eps
        self.last_epoch, self._step_count = 0, 0
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self._last_lr = self._current()
        self._reset()

    def _reset(self) -> None:
        self.best = math.inf if self.mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def is_better(self, a: float, best: float) -> bool:
        """Whether ``a`` improves on ``best`` by the threshold."""
        if self.mode == "min":
            bound = (
                best * (1 - self.threshold)
                if self.threshold_mode == "rel"
                else best - (self.threshold)
            )
            return a < bound
        bound = (
            best * (self.threshold + 1) if self.threshold_mode == "rel" else best + (self.threshold)
        )
        return a > bound

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler is waiting after a reduction."""
        return self.cooldown_counter > 0

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Take one epoch's ``metrics`` (a number or a 0-d Tensor)."""
        current = float(metrics)
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for i, group in enumerate(self.optimizer.param_groups):
                old = float(group["lr"])
                new = max(old * self.factor, self.min_lrs[i])
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = self._current()
