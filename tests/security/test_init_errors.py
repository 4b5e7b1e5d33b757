"""A rank that gives up on the rendezvous names the ranks that never came, whoever is first."""

from __future__ import annotations

import pytest

from tests._procs import reported


@pytest.mark.parametrize("late_rank", [1, 0])
def test_every_rank_that_gives_up_names_the_missing_rank(workers, late_rank):
    """World of 3, rank 2 never starts. One of ranks 0 and 1 starts late, so their
    timeouts expire in either order: rank 0 first (it closes the store; the other
    rank used to hear only "the store closed (rank 0 gone?)") or rank 1 first.
    """
    from tests.security import _rendezvous_workers as W

    delay = [{"TPJ_START_DELAY": "0"}, {"TPJ_START_DELAY": "0"}]
    delay[late_rank]["TPJ_START_DELAY"] = "2"
    env = {"WORLD_SIZE": "3", "TPJ_INIT_TIMEOUT": "4"}
    res = workers(W.init_expecting_error, 2, timeout=120, env=env, per_rank_env=delay, check=False)
    for r in res:
        error = reported(r)["error"]
        assert error is not None, r  # init_rpc gave up
        assert "ranks [2]" in error, error
        assert "rank 0 gone" not in error and "closed" not in error, error
