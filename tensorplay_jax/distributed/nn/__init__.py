"""``tensorplay_jax.distributed.nn``: ``RemoteModule`` (modules on other workers) and ``api``.

Example (in a job with a worker named ``worker1``)::

    from tensorplay_jax.distributed.nn import RemoteModule
    remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
    out = remote_linear(tp.randn(4, 16))
"""

from tensorplay_jax.distributed.nn import api as api
from tensorplay_jax.distributed.nn.api import RemoteModule as RemoteModule

__all__ = ["RemoteModule", "api"]
