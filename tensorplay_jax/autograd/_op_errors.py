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

__all__ = ["OpTypeError", "OpValueError", "op_error"]


class OpTypeError(RuntimeError, TypeError):
    """A built-in operation's operands do not fit (JAX raised ``TypeError``)."""


class OpValueError(RuntimeError, ValueError):
    """A built-in operation's operands do not fit (JAX raised ``ValueError``)."""


_TURNED: dict[type, type] = {TypeError: OpTypeError, ValueError: OpValueError}


def op_error(e: BaseException) -> BaseException:
    """The error to raise for ``e`` from a built-in operation: turned, or ``e`` itself."""
    cls = _TURNED.get(type(e))
    if cls is None:
        return e
    out = cls(str(e))
    out.__cause__ = e
    return out
