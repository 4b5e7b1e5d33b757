"""The optional native yield-spin of socket link readers, and its budget.

Before a reader sleeps in a receive it yield-spins for the next frame, up
to ``RPC_SPIN_US`` (``TENSORPLAY_JAX_RPC_SPIN_US``; 0 turns it off), in the
optional C extension ``tensorplay_jax.rpc._spin`` with the GIL released (at
most two threads per process at once). A call's reply or a backward's
gradients usually come within that window, and catching them awake saves the
wake-up of a sleeping CPU, which comes back with cold caches (the gain shows
most in distributed autograd's one-hop iteration: ``benchmarks/dist_autograd.py``
with ``TENSORPLAY_JAX_RPC_SPIN_US=0`` against the default). Without the
extension (no C compiler at install time) readers sleep at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import RPC_SPIN_US, SPIN_US_ENV

log = logging.getLogger(__name__)


def _spinner() -> tuple[Callable[[int, int], bool] | None, int]:
    """The native yield-spin (optional C extension) and its budget in ns, or (None, 0)."""
    try:
        spin_us = settings.get_float(SPIN_US_ENV)  # microseconds; 0: never spin
    except ValueError:
        log.warning("rpc: ignoring %s=%r (not a number)", SPIN_US_ENV, settings.raw(SPIN_US_ENV))
        spin_us = RPC_SPIN_US
    if spin_us <= 0:
        return None, 0
    try:
        from tensorplay_jax.rpc._spin import spin_readable
    except ImportError:  # built without a C compiler: block at once
        return None, 0
    return spin_readable, int(spin_us * 1000)


_SPIN, _SPIN_NS = _spinner()
