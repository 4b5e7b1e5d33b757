"""Tools for testing distributed code: worker jobs, gradient checks, simulated hosts.

* :class:`Workers` (and the pytest fixtures ``dist_workers`` /
  ``dist_workers_module`` of the ``tensorplay_jax`` plugin): N real RPC workers
  driven from the test process;
* :func:`check_dist_grads`: distributed autograd's gradients against ``jax.grad``
  of the same computation in one process and against finite differences;
* :func:`in_process_rpc`: every RPC runs in this process (the oracle's path);
* :mod:`.netns`: simulated hosts on one machine.

Example:
    >>> from tensorplay_jax.testing import netns
    >>> netns.unavailable() is None or isinstance(netns.unavailable(), str)
    True
"""

from tensorplay_jax.testing.grads import check_dist_grads as check_dist_grads
from tensorplay_jax.testing.grads import default_tolerance as default_tolerance
from tensorplay_jax.testing.inprocess import in_process_rpc as in_process_rpc
from tensorplay_jax.testing.workers import WorkerDied as WorkerDied
from tensorplay_jax.testing.workers import Workers as Workers

__all__ = [
    "WorkerDied",
    "Workers",
    "check_dist_grads",
    "default_tolerance",
    "in_process_rpc",
    "netns",
]
