"""``LRScheduler``, the base of every learning-rate schedule (``optim.lr_scheduler``)."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["LRScheduler", "positive_int"]


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
        self._initial_step()

    def get_lr(self) -> list[float]:
        """The rate of each group for epoch ``last_epoch`` (subclasses define it)."""
        raise NotImplementedError

    def _current(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch and set each group's ``lr`` to its new rate; with ``epoch``
        (torch's deprecated form, which ``SequentialLR`` uses), jump to that epoch, at the
        schedule's closed form where it has one."""
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = self._closed_form()
            values = self.get_lr() if closed is None else closed
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = self._current()

    def _closed_form(self) -> list[float] | None:
        """The rates at ``last_epoch`` from the initial ones (None: the schedule has none)."""
        return None

    def _initial_step(self) -> None:
        """Count steps afresh and take the first one, as the constructor does."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

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


def positive_int(cls: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{cls}: {name} must be a positive int, got {value!r}")
    return value
