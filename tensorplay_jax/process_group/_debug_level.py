"""``DebugLevel``: how much a job checks and says about its collectives (TORCH_DISTRIBUTED_DEBUG).

tensorplay reads ``TORCH_DISTRIBUTED_DEBUG`` (``OFF``, ``INFO`` or ``DETAIL``) when it
starts and again at ``set_debug_level_from_env()``. Here every collective already
compares its description (kind, shapes, dtypes, order) across ranks before data
moves, at every level, so the level changes no check; it is kept so scripts that
read or set it run unchanged.

Example:
  >>> set_debug_level(DebugLevel.INFO)
  >>> get_debug_level()
  <DebugLevel.INFO: 1>
  >>> set_debug_level(DebugLevel.OFF)
"""

from __future__ import annotations

import enum
import os

__all__ = ["DebugLevel", "get_debug_level", "set_debug_level", "set_debug_level_from_env"]

_ENV = "TORCH_DISTRIBUTED_DEBUG"


class DebugLevel(enum.IntEnum):
    """``OFF``, ``INFO`` or ``DETAIL``, in increasing detail."""

    OFF = 0
    INFO = 1
    DETAIL = 2

    def __str__(self) -> str:
        return f"DebugLevel.{self.name}"


def _from_env() -> DebugLevel:
    value = os.environ.get(_ENV, "OFF").upper()
    if value not in DebugLevel.__members__:
        raise ValueError(f"The value of {_ENV} must be OFF, INFO, or DETAIL.")
    return DebugLevel[value]


try:
    _level = _from_env()
except ValueError:
    _level = DebugLevel.OFF  # a bad value fails at set_debug_level_from_env(), not at import


def get_debug_level() -> DebugLevel:
    """The current level."""
    return _level


def set_debug_level(level: DebugLevel) -> None:
    """Set the level; ``level`` must be a :class:`DebugLevel`.

    Example:
      >>> set_debug_level("INFO")
      Traceback (most recent call last):
      ...
      TypeError: set_debug_level(level): level must be a DebugLevel, not str
    """
    global _level
    if not isinstance(level, DebugLevel):
        raise TypeError(
            f"set_debug_level(level): level must be a DebugLevel, not {type(level).__name__}"
        )
    _level = level


def set_debug_level_from_env() -> None:
    """Set the level from ``TORCH_DISTRIBUTED_DEBUG`` (unset: ``OFF``); a value other than
    ``OFF``, ``INFO`` or ``DETAIL`` (any case) raises ValueError."""
    set_debug_level(_from_env())
