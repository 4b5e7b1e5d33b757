"""The errors of a built-in operation whose operands do not fit: RuntimeError, as tensorplay's.

JAX reports operands that do not fit (shapes that do not broadcast, contracting
dimensions that differ, arrays that do not concatenate) as a ``TypeError`` or a
``ValueError``; tensorplay's operators raise ``RuntimeError``. ``call_op`` and
``call_rule`` raise :class:`OpTypeError` / :class:`OpValueError` instead, which
are both: a port's ``except RuntimeError:`` and a JAX user's ``except
TypeError:`` catch them. Only those exact JAX types are turned; their
subclasses (``jax.errors.ConcretizationTypeError`` ...) pass as they are.

Example:
    >>> import tensorplay_jax as tp
    >>> try:
    ...     tp.ones(3) + tp.ones(5)
    ... except RuntimeError as e:
    ...     print(type(e).__name__, isinstance(e, TypeError))
    OpTypeError True
"""

from __future__ import annotations

import ast
import re

__all__ = ["OpTypeError", "OpValueError", "op_error"]


class OpTypeError(RuntimeError, TypeError):
    """A built-in operation's operands do not fit (JAX raised ``TypeError``)."""


class OpValueError(RuntimeError, ValueError):
    """A built-in operation's operands do not fit (JAX raised ``ValueError``)."""


_TURNED: dict[type, type] = {TypeError: OpTypeError, ValueError: OpValueError}


# JAX's two spellings: "add got incompatible shapes for broadcasting: (10,), (5,)" and
# "Incompatible shapes for broadcasting: shapes=[(3, 1, 10), (2, 5)]".
_BROADCAST = re.compile(
    r"ncompatible shapes for broadcasting: (?:shapes=\[)?(\([\d, ]*\)), (\([\d, ]*\))"
)


def _torch_broadcast_sentence(message: str) -> str:
    """tensorplay's sentence for the first two shapes JAX could not broadcast, or ""."""
    m = _BROADCAST.search(message)
    if m is None:
        return ""
    a, b = (ast.literal_eval(g) for g in m.groups())
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    for dim in range(n - 1, -1, -1):
        if a[dim] != b[dim] and 1 not in (a[dim], b[dim]):
            return (
                f" The size of tensor a ({a[dim]}) must match the size of tensor b ({b[dim]}) "
                f"at non-singleton dimension {dim}"
            )
    return ""


def op_error(e: BaseException) -> BaseException:
    """The error to raise for ``e`` from a built-in operation: turned, or ``e`` itself.

    A broadcasting error also says tensorplay's sentence ("The size of tensor a (10)
    must match the size of tensor b (5) at non-singleton dimension 0").
    """
    cls = _TURNED.get(type(e))
    if cls is None:
        return e
    out = cls(str(e) + _torch_broadcast_sentence(str(e)))
    out.__cause__ = e
    return out
