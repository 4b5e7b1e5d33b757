"""The one prelude of every multi-process test's worker functions (run by ``tests._procs``).

A worker function lives in a module next to its tests (``tests/rpc/_workers.py`` ...);
:func:`tests._procs.run_workers` starts N processes that import and call it. They share
these helpers: the rank and world size from the environment, RPC start-up with the
usual ``w{rank}`` names, an error check by substring, a bounded wait, a tape
Tensor as numpy, and :func:`report`, which hands values back to the test process
(read there with :func:`tests._procs.reported`), or :func:`hand_back` for values
too large or too typed for JSON (arrays): the test asserts, not the worker.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Callable
from typing import Any


def rank_and_world_size() -> tuple[int, int]:
    """This worker's ``RANK`` and ``WORLD_SIZE``, as set by ``run_workers``."""
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def init_rpc(prefix: str = "w", **kwargs: Any) -> tuple[int, int]:
    """Start RPC as ``f"{prefix}{rank}"`` in a world of ``WORLD_SIZE``; returns ``(rank, ws)``."""
    from tensorplay_jax.distributed import rpc

    rank, ws = rank_and_world_size()
    rpc.init_rpc(f"{prefix}{rank}", rank=rank, world_size=ws, **kwargs)
    return rank, ws


def expect(exc_type: type[BaseException], substrings, fn: Callable, *args, **kwargs):
    """Call ``fn``; it must raise ``exc_type`` whose message holds every one of ``substrings``."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        for s in substrings:
            assert s in str(e), (s, str(e))
        return e
    raise AssertionError(f"{fn} did not raise {exc_type}")


def wait_until(pred: Callable[[], object], timeout: float = 20.0, poll: float = 0.05) -> None:
    """Poll ``pred`` every ``poll`` seconds until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(poll)


def npa(t: Any):
    """A tape ``Tensor`` (detached) or an array as a numpy array."""
    import numpy as np

    import tensorplay_jax as tp

    return np.asarray(t.detach().value if isinstance(t, tp.Tensor) else t)


RESULT = "RESULT "


def report(**values: Any) -> None:
    """Print one ``RESULT {json}`` line of ``values`` for the test process to check."""
    print(RESULT + json.dumps(values), flush=True)


OUT_DIR = "TPJ_TEST_OUT"


def hand_back(values: dict[str, Any]) -> None:
    """Pickle ``values`` (arrays included) to ``$TPJ_TEST_OUT/{RANK}.pkl`` for the test process.

    Read there with :func:`tests._procs.run_and_collect`.
    """
    rank, _ = rank_and_world_size()
    with open(os.path.join(os.environ[OUT_DIR], f"{rank}.pkl"), "wb") as f:
        pickle.dump(values, f)


def error_text(fn: Callable, *args, **kwargs) -> str | None:
    """``"TypeName: message"`` of what ``fn(*args, **kwargs)`` raised; None if it returned."""
    try:
        fn(*args, **kwargs)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None
