"""cloudpickle that keeps each function's source file name, so remote tracebacks show user lines.

cloudpickle sends a function that the receiver cannot import (a lambda, a
nested function, one from a notebook or a main script) by value: its code
object travels in the pickle. cloudpickle renames that code's file to
``<dynamic-code>`` (to make the bytes independent of where the function was
defined), so a traceback raised in it on another process shows
``File "<dynamic-code>", line 12`` with no source. :class:`Pickler` sends each
code object as ``marshal`` bytes instead, which keep ``co_filename`` and the
position table: the receiver's traceback names the user's file and line, and
``linecache`` prints the source line wherever that file can be read (every
worker on the same host; on another host the file name and line still show).
``marshal`` bytes are specific to the Python version, as are cloudpickle's
own code records: sender and receiver run the same interpreter either way.

Example:
    >>> import traceback
    >>> def f():
    ...     raise ValueError("here")
    >>> g = loads(dumps(f))
    >>> try:
    ...     g()
    ... except ValueError as e:
    ...     frame = traceback.extract_tb(e.__traceback__)[-1]
    >>> frame.filename != "<dynamic-code>", frame.name
    (True, 'f')
"""

from __future__ import annotations

import io
import marshal
import pickle
import types
from collections import ChainMap
from typing import Any, ClassVar

import cloudpickle

__all__ = ["Pickler", "dumps", "loads"]


def _code_reduce(code: types.CodeType) -> tuple[Any, tuple[bytes]]:
    # marshal writes a code object whole (nested code, file name, line and column
    # table), as a .pyc holds it; marshal.loads rebuilds it in the receiver.
    return marshal.loads, (marshal.dumps(code),)


class Pickler(cloudpickle.Pickler):
    """A ``cloudpickle.Pickler`` whose by-value functions keep their file name and lines.

    Example:
        >>> buf, f = io.BytesIO(), lambda: 1
        >>> Pickler(buf).dump(f)
        >>> loads(buf.getvalue()).__code__.co_filename == f.__code__.co_filename
        True
    """

    dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
        {types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table
    )


def dumps(obj: Any, protocol: int | None = None) -> bytes:
    """``obj`` pickled by :class:`Pickler` (what ``cloudpickle.dumps`` does, file names kept).

    Example:
        >>> loads(dumps(lambda x: x + 1))(1)
        2
    """
    buf = io.BytesIO()
    Pickler(buf, protocol=protocol).dump(obj)
    return buf.getvalue()


loads = pickle.loads
