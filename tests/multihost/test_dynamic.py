"""A dynamic RPC group across two simulated hosts: join, SIGKILL, replacement, leave.

One job (``_dynamic_workers.dynamic_group``): ``ps`` on host 0 hosts the group,
``m1`` and ``m2`` join from host 1, ``m2`` is killed and a new process on host 1
takes its name and rank; ``ps`` reports what it saw, each test asserts one part.
"""

from __future__ import annotations

import pytest

from tests._procs import reported, run_on_hosts
from tests._worker import OUT_DIR
from tests.multihost import _dynamic_workers as W


@pytest.fixture(scope="module")
def seen(cluster, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("dynamic")
    res = run_on_hosts(
        cluster,
        W.dynamic_group,
        [0, 1, 1, 1],
        timeout=150,
        env={OUT_DIR: str(out)},
        allow_exit={2: -9},
    )
    return reported(res[0])


def test_members_on_another_host_join_and_are_called(seen):
    assert seen["joined"] == ["ps", "m1", "m2"] and seen["m1_sees"] == ["ps", "m1", "m2"]
    assert (seen["m1_square"], seen["m2_value"]) == (25, [0, 1, 2])


def test_a_pending_call_to_a_killed_remote_member_fails_at_once_naming_it(seen):
    assert seen["pending"].startswith("RpcPeerError") and "'m2'" in seen["pending"], seen
    assert seen["pending_s"] < 2.0, seen


def test_a_killed_remote_member_is_removed_and_named_as_dead(seen):
    assert seen["after_death"] == ["ps", "m1"]
    assert seen["call_dead"].startswith("RpcPeerError") and "died" in seen["call_dead"], seen


def test_a_replacement_on_another_host_takes_the_name(seen):
    assert seen["replaced"] == ["ps", "m1", "m2"] and seen["replacement_square"] == 36


def test_an_rref_of_the_killed_member_fails_after_the_replacement(seen):
    assert seen["old_rref"].startswith("RpcPeerError") and "'m2'" in seen["old_rref"], seen
