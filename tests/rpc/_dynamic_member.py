"""A member of a dynamic RPC group, started by ``tests/rpc/test_dynamic.py``.

``python -m tests.rpc._dynamic_member NAME RANK`` joins the group that the test
process hosts (``MASTER_ADDR``/``MASTER_PORT``; no ``WORLD_SIZE``), prints
``joined``, then serves until the test calls :func:`tests.rpc._dynamic_targets.leave`
(it then leaves with ``rpc.shutdown()`` and exits 0), or kills it. It exits by
itself if the test process goes away.
"""

from __future__ import annotations

import os
import sys

from tensorplay_jax.distributed import rpc
from tests.rpc import _dynamic_targets as targets


def main() -> None:
    name, rank = sys.argv[1], int(sys.argv[2])
    rpc.init_rpc(name, rank=rank, world_size=None)
    print("joined", flush=True)
    parent = os.getppid()
    while not targets.LEAVE.wait(0.5):
        if os.getppid() != parent:  # the test process is gone
            os._exit(3)
    rpc.shutdown()
    print("left", flush=True)


if __name__ == "__main__":
    main()
