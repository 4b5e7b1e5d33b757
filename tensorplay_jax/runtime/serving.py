"""Whether this process serves other processes' calls on threads of its own (an RPC agent).

A served call runs user code on a thread the caller does not see, so JAX may
start its backends there at any moment. JAX's multi-process runtime must start
before the backends do, and then makes their start a step that every process of
the job takes together: a process that serves could start it half-way, or block
a served call on ranks that wait for that very call. So ``init_process_group``
does not start JAX's runtime while any rank serves (``process_group._startup``);
the RPC agent says when it starts and stops serving (``rpc._current.set_current``).

Example:
    >>> from tensorplay_jax.runtime import serving
    >>> serving.serving()  # no init_rpc in this process
    False
"""

from __future__ import annotations

__all__ = ["serving", "set_serving"]

_serving = False


def set_serving(on: bool) -> None:
    """Record that this process now serves calls (``on``) or no longer does."""
    global _serving
    _serving = bool(on)


def serving() -> bool:
    """Whether this process serves calls from other processes now."""
    return _serving
