"""The XLA engine's programs run on every jaxlib, whatever stack reaches them and
whatever JAX's persistent cache holds (``runtime.cross_process``).

With jaxlib 0.12.1 both failed before: a send and its receive traced from different
functions, and a job's second run, its programs in the cache, each hung until gloo's
timeout.
"""

from __future__ import annotations

import numpy as np

from tests._procs import run_and_collect
from tests.process_group import _cross_process_workers as W


def _job(tmp_path, run: str, env: dict[str, str]) -> list[dict]:
    out = tmp_path / run
    out.mkdir()
    return run_and_collect(W.collectives_and_p2p, 2, out, env=env, timeout=120)


def _check(got: list[dict]) -> None:
    for r in (0, 1):
        np.testing.assert_array_equal(got[r]["all_reduce"], np.full(3, 3.0, np.float32))
    np.testing.assert_array_equal(got[1]["recv"], np.arange(4, dtype=np.float32))


def test_a_send_and_its_recv_reached_through_different_functions_meet(tmp_path) -> None:
    _check(_job(tmp_path, "once", {"TENSORPLAY_JAX_COMPILATION_CACHE": "0"}))


def test_a_rerun_with_a_warm_cache_runs_its_collectives(tmp_path) -> None:
    env = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache")}
    for run in ("cold", "warm"):
        _check(_job(tmp_path, run, env))
