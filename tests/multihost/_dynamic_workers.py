"""The worker of ``tests/multihost/test_dynamic.py``: a dynamic RPC group across two hosts.

Rank 0 (``ps``, host 0) hosts the group; ranks 1 and 2 (``m1``, ``m2``, host 1)
join it; ``ps`` has ``m2`` kill itself, then rank 3 (host 1) takes ``m2``'s name
and rank once ``ps`` says so (a file in ``TPJ_TEST_OUT``). ``ps`` reports what it
saw; the test asserts.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np

from tensorplay_jax.distributed import rpc
from tests._worker import OUT_DIR, error_text, report, wait_until

LEAVE = threading.Event()


def leave() -> None:
    LEAVE.set()


def die() -> None:
    """Kill this process (SIGKILL) a moment after answering."""
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGKILL)).start()


def names() -> list[str]:
    return [w.name for w in rpc.get_worker_infos()]


def host() -> str:
    return os.environ["TPJ_HOSTS"]


def _serve_until_told() -> None:
    assert LEAVE.wait(120), "ps never said leave"
    rpc.shutdown()


def dynamic_group() -> None:
    rank = int(os.environ.pop("RANK"))
    os.environ.pop("WORLD_SIZE")  # a dynamic group: no world size
    flag = os.path.join(os.environ[OUT_DIR], "replace")
    if rank == 0:
        rpc.init_rpc("ps", rank=0, world_size=None)
        wait_until(lambda: len(rpc.get_worker_infos()) == 3, timeout=60)
        seen = {"joined": names()}
        # m1 learns of m2 from the store's log on its own (no later than m2's init_rpc returns).
        wait_until(lambda: len(rpc.rpc_sync("m1", names)) == 3, timeout=30)
        seen["m1_sees"] = rpc.rpc_sync("m1", names)
        seen["m1_square"] = int(rpc.rpc_sync("m1", np.square, args=(5,)))
        owned_by_m2 = rpc.remote("m2", np.arange, args=(3,))
        seen["m2_value"] = owned_by_m2.to_here().tolist()
        pending = rpc.rpc_async("m2", time.sleep, args=(60,))
        t0 = time.monotonic()
        rpc.rpc_sync("m2", die)
        seen["pending"] = error_text(pending.wait, 30)
        seen["pending_s"] = time.monotonic() - t0
        wait_until(lambda: "m2" not in names(), timeout=30)
        seen["after_death"] = names()
        seen["call_dead"] = error_text(rpc.rpc_sync, "m2", np.square, args=(2,))
        open(flag, "w").close()
        wait_until(lambda: "m2" in names(), timeout=60)
        seen["replaced"] = names()
        seen["replacement_square"] = int(rpc.rpc_sync("m2", np.square, args=(6,)))
        seen["old_rref"] = error_text(owned_by_m2.to_here)
        for m in ("m1", "m2"):
            rpc.rpc_sync(m, leave)
        rpc.shutdown(timeout=60)
        report(**seen)
    elif rank in (1, 2):
        rpc.init_rpc(f"m{rank}", rank=rank, world_size=None)
        _serve_until_told()
    else:
        wait_until(lambda: os.path.exists(flag), timeout=90)
        rpc.init_rpc("m2", rank=2, world_size=None)
        _serve_until_told()
