"""tensorplay's ``profiler.profile``: this process's events inside a block, with the API of
``torch.profiler`` (``activities``, ``events()``, ``key_averages()``, ``step()``).

It is :class:`tensorplay_jax.autograd.profiler.profile` (the same spans of
``runtime.trace``, named as tensorplay names them: ``"gloo:all_reduce"``, ``"gloo:send"``)
with the newer API's keywords and methods. The CPU is the one activity recorded;
for device time, ``jax.profiler.trace`` records XLA's own timeline (this profiler's
spans appear there too, see ``record_function``). A ``schedule`` is accepted and
every step is recorded; ``on_trace_ready`` is called with the profiler when the
block ends.

Example:
  >>> from tensorplay_jax import profiler
  >>> acts = [profiler.ProfilerActivity.CPU]
  >>> with profiler.profile(activities=acts, record_shapes=True) as prof:
  ...     with profiler.record_function("step"):
  ...         pass
  >>> [e.name for e in prof.events()]
  ['step']
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from tensorplay_jax.autograd import profiler as _autograd_profiler

__all__ = ["ProfilerActivity", "profile"]


class ProfilerActivity(enum.Enum):
    """What a profile records (tensorplay's names); the CPU timeline is the one here."""

    CPU = "CPU"
    CUDA = "CUDA"
    XPU = "XPU"
    MTIA = "MTIA"


class profile(_autograd_profiler.profile):
    """Record this process's spans while the block runs, as ``torch.profiler.profile``.

    tensorplay's other keywords (``schedule``, ``profile_memory``, ``with_stack``,
    ``with_flops``, ``with_modules``, ...) are accepted and change nothing.

    Args:
      activities: :class:`ProfilerActivity` members; only ``CPU`` has a timeline here,
        the others record nothing more (None: ``[CPU]``).
      record_shapes: each event keeps its input shapes (``event.input_shapes``).
      on_trace_ready: called with this profiler when the block ends.

    Raises:
      TypeError: an activity is not a :class:`ProfilerActivity`.
    """

    def __init__(
        self,
        *,
        activities: Iterable[ProfilerActivity] | None = None,
        record_shapes: bool = False,
        on_trace_ready: Callable[[profile], Any] | None = None,
        **_: Any,
    ) -> None:
        super().__init__(record_shapes=record_shapes)
        self.activities = set(activities or [ProfilerActivity.CPU])
        bad = [a for a in self.activities if not isinstance(a, ProfilerActivity)]
        if bad:
            raise TypeError(f"profile: activities must be ProfilerActivity members, got {bad!r}")
        self.on_trace_ready = on_trace_ready

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def events(self) -> list[_autograd_profiler.FunctionEvent]:
        """The events recorded in the block (``FunctionEvent``: name, count, time, shapes)."""
        return self.function_events

    def step(self) -> None:
        """Mark the end of a training step (a ``schedule``'s clock); every step is recorded."""
