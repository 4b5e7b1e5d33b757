"""Joining a dynamic group that is not there: an error within seconds, naming the problem.

A dynamic group (``world_size=None``) lives in the rendezvous store its rank 0
hosts from ``init_rpc`` to ``shutdown()``. The test process is that rank 0 (or a
fixed-size group's); the joiners are real processes (``tests/rpc/_dynamic_member.py
--join-once``) that report what ``init_rpc`` raised and how long it took. The
oracle is tensorplay's: a group that mixes fixed-size and dynamic members is
refused (``test_dynamic_and_static_init_rpc_together``); a joiner never waits for
``init_timeout`` (120 s) for a group that is gone.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator

import pytest

from tensorplay_jax.distributed import rpc
from tensorplay_jax.rpc import _agent
from tests._procs import free_port
from tests.rpc import _dynamic_targets as T
from tests.rpc._jobs import environ
from tests.rpc.test_dynamic import Member, join, until

PROMPT_S = 15.0  # the joiner's own init_rpc, start-up excluded (its wait for a store: 10 s)


@pytest.fixture
def master() -> Iterator[None]:
    """A fresh MASTER_ADDR/MASTER_PORT, with no RANK or WORLD_SIZE, in the environment."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    with environ(env):
        yield
    os.environ.update(saved)
    if rpc.is_initialized():
        rpc.shutdown(graceful=False)


def join_once(name: str, rank: int) -> dict:
    """What ``init_rpc(name, rank=rank, world_size=None)`` did in a new process."""
    m = Member("--join-once", name, str(rank))
    try:
        assert m.line() == "trying"
        return json.loads(m.line())
    finally:
        m.kill()


def test_a_join_after_rank_0_shut_the_group_down_fails_within_seconds(master):
    rpc.init_rpc("ps", rank=0, world_size=None)
    rpc.shutdown()
    got = join_once("late", 1)
    assert got["type"] == "TimeoutError", got
    assert "found no dynamic group" in got["message"] and "shut down" in got["message"], got
    assert got["seconds"] < PROMPT_S, got


def test_a_join_while_rank_0_shuts_the_group_down_is_refused_naming_it(master):
    rpc.init_rpc("ps", rank=0, world_size=None)
    m1 = join("m1", 1)
    stopping = threading.Thread(target=rpc.shutdown, kwargs={"timeout": 60})
    stopping.start()  # rank 0 waits for m1 to leave
    group = _agent.current_agent()._store_server._srv.state.group
    try:
        assert until(lambda: group.closing is not None)
        got = join_once("late", 2)
    finally:
        rpc.rpc_async("m1", T.leave)
        stopping.join(60)
        m1.kill()
    assert got["type"] == "ValueError", got
    assert "'ps'" in got["message"] and "shutting it down" in got["message"], got
    assert got["seconds"] < PROMPT_S, got


def test_a_dynamic_joiner_started_before_a_fixed_size_rank_0_is_refused(master):
    joiner = Member("--join-once", "dyn", "1")
    assert joiner.line() == "trying"  # it waits for the store, which comes now
    errors: list[BaseException] = []

    def rank0() -> None:
        try:
            opts = rpc.GrpcRpcBackendOptions(init_timeout=30)
            rpc.init_rpc("ps", rank=0, world_size=2, rpc_backend_options=opts)
        except Exception as e:  # rank 1 never arrives as a fixed-size worker
            errors.append(e)

    t = threading.Thread(target=rank0)
    t.start()
    try:
        got = json.loads(joiner.line())
    finally:
        joiner.kill()
        t.join(60)
    assert got["type"] == "MixedGroupError", got  # a RuntimeError (tensorplay's) and a ValueError
    assert "RPC group mixes statically and dynamically initialized members" in got["message"]
    assert "fixed-size" in got["message"] and "world_size" in got["message"], got
    assert errors, "rank 0 of the fixed-size group must not start with a dynamic member"


def test_world_size_none_is_dynamic_even_with_world_size_in_the_environment(master):
    with environ({"WORLD_SIZE": "4"}):  # what every launcher sets; the joiner sees it too
        rpc.init_rpc("ps", rank=0, world_size=None)  # a fixed-size rank 0 would wait for 3
        m1 = join("m1", 1)
        try:
            assert until(lambda: sorted(w.name for w in rpc.get_worker_infos()) == ["m1", "ps"])
            rpc.rpc_sync("m1", T.leave)  # a dynamic member leaves while the group goes on
            assert until(lambda: [w.name for w in rpc.get_worker_infos()] == ["ps"])
        finally:
            m1.kill()
