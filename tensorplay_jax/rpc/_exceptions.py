"""Exceptions on the wire: a record of class and message (no pickle), rebuilt on the other side.

Registered with the codec (``register_type``) so that an exception inside a
value travels too.

Example:
    >>> rebuild_exception(exception_record(KeyError("k")))
    KeyError("'k'")
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.rpc import _objref
from tensorplay_jax.rpc._wire_types import register_type

__all__ = ["exception_record", "rebuild_exception"]


def exception_record(exc: BaseException, message: str | None = None) -> list[Any]:
    """Describe ``exc`` by class and message (no pickle), for :func:`rebuild_exception`."""
    t = type(exc)
    return [t.__module__, t.__qualname__, str(exc) if message is None else message]


def rebuild_exception(record: list[Any]) -> BaseException:
    """Rebuild an exception of the same type with the recorded message.

    A class this worker cannot import or construct from one message argument
    becomes a RuntimeError that names it, worded as tensorplay's ("Original
    exception on remote side was ...").
    """
    module, qualname, message = record
    try:
        cls = _objref.resolve(module, qualname)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError(f"{module}.{qualname} is not an exception class")
        return cls(message)
    except Exception as e:
        return RuntimeError(
            f"Failed to create original exception type {module}.{qualname}. Error msg was "
            f"{type(e).__name__}: {e} Original exception on remote side was {message}"
        )


def _encode_exception(exc: BaseException) -> list[Any]:
    return exception_record(exc)


register_type(
    BaseException, _encode_exception, rebuild_exception, name="exception", subclasses=True
)
