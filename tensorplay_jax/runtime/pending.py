"""Work a thread holds back, and the call that runs it at a boundary.

The tape's speed-up layer defers recorded operations (``autograd.speedups``) until
a value is needed.
A served RPC call is a boundary a lower layer knows of but cannot see into: when
the user function returns, the work it recorded belongs to that call (its span,
its errors, its lock), so the dispatcher calls :func:`run_deferred` there. Without
it, the next call served by the same thread would join the same pending work, and
how many calls join would vary from step to step.

The layer registers its runner when ``tensorplay_jax.autograd`` installs it
(``speedups.install``); until then there is nothing to run.

Example:
    >>> from tensorplay_jax.runtime import pending
    >>> ran = []
    >>> def runner():
    ...     ran.append(True)
    >>> pending.register(runner)
    >>> pending.run_deferred()
    >>> pending.unregister(runner)
    >>> pending.run_deferred()
    >>> ran
    [True]
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["register", "run_deferred", "unregister"]

_runners: tuple[Callable[[], None], ...] = ()


def register(runner: Callable[[], None]) -> None:
    """Call ``runner()`` at each boundary: it runs the calling thread's held-back work."""
    global _runners
    _runners = (*_runners, runner)


def unregister(runner: Callable[[], None]) -> None:
    """Stop calling ``runner`` (no-op if it was not registered)."""
    global _runners
    _runners = tuple(r for r in _runners if r is not runner)


def run_deferred() -> None:
    """Run the calling thread's held-back work now (its errors propagate)."""
    for runner in _runners:
        runner()
