"""A member of a dynamic RPC group, started by ``tests/rpc/test_dynamic.py``.

``python -m tests.rpc._dynamic_member NAME RANK`` joins the group that the test
process hosts (``MASTER_ADDR``/``MASTER_PORT``; no ``WORLD_SIZE``), prints
``joined``, then serves until the test calls :func:`tests.rpc._dynamic_targets.leave`
(it then leaves with ``rpc.shutdown()`` and exits 0), or kills it. It exits by
itself if the test process goes away.

``python -m tests.rpc._dynamic_member --refusals TAKEN_NAME TAKEN_RANK`` instead
tries the joins the group must refuse and prints each error as one JSON line
(``{"case": ..., "type": ..., "message": ...}``), then exits 0.

``python -m tests.rpc._dynamic_member --join-once NAME RANK`` tries to join once
and prints ``trying``, then the outcome as one JSON line (``{"type", "message",
"seconds"}``).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

from tensorplay_jax.distributed import rpc
from tests.rpc import _dynamic_targets as targets


def _refused(case: str, **kwargs: object) -> None:
    try:
        rpc.init_rpc(**kwargs)  # type: ignore[arg-type]
    except Exception as e:
        print(json.dumps({"case": case, "type": type(e).__name__, "message": str(e)}), flush=True)
    else:
        rpc.shutdown(graceful=False)
        print(json.dumps({"case": case, "type": None, "message": "joined"}), flush=True)


def refusals(taken_name: str, taken_rank: int) -> None:
    """Each join the group must refuse, one JSON line each."""
    _refused("name", name=taken_name, rank=taken_rank + 100, world_size=None)
    _refused("rank", name="newcomer", rank=taken_rank, world_size=None)
    _refused("fixed", name="fixed", rank=taken_rank + 101, world_size=taken_rank + 102)
    os.environ["TENSORPLAY_JAX_RPC_SECRET"] = secrets.token_hex(32)  # not the job's secret
    _refused("secret", name="outsider", rank=taken_rank + 103, world_size=None)


def join_once(name: str, rank: int) -> None:
    """Say ``trying``, try to join once, print the outcome as a JSON line with its seconds."""
    print("trying", flush=True)
    t0 = time.monotonic()
    try:
        rpc.init_rpc(name, rank=rank, world_size=None)
    except Exception as e:
        out = {"type": type(e).__name__, "message": str(e)}
    else:
        rpc.shutdown()
        out = {"type": None, "message": "joined"}
    print(json.dumps({**out, "seconds": time.monotonic() - t0}), flush=True)


def main() -> None:
    if sys.argv[1] == "--refusals":
        refusals(sys.argv[2], int(sys.argv[3]))
        return
    if sys.argv[1] == "--join-once":
        join_once(sys.argv[2], int(sys.argv[3]))
        return
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
