"""Dynamic membership (``init_rpc(name, rank=r, world_size=None)``) over real processes.

The test process is rank 0 (``ps``): it hosts the group and asserts. Members are
real processes (``tests/rpc/_dynamic_member.py``) that join, leave with
``rpc.shutdown()``, or are SIGKILLed, and a replacement takes a dead member's
name and rank. Each scenario runs once in a module-scoped fixture that records
what it saw (so the tests do not depend on their order); each test asserts one
behaviour of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import optax
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.autograd import _context
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._procs import REPO_ROOT, free_port
from tests.rpc import _dynamic_targets as T
from tests.rpc._jobs import environ

JOIN_TIMEOUT_S = 60.0


class Member:
    """A member process: ``python -m tests.rpc._dynamic_member NAME RANK``."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.rpc._dynamic_member", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )

    def line(self, timeout: float = JOIN_TIMEOUT_S) -> str:
        """Its next line of output (fails after ``timeout`` s, or if it exits first)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        out = self.proc.stdout.readline() if ready else ""
        if not out:
            self.kill()
            raise AssertionError(f"member said nothing within {timeout} s: {self.stderr()}")
        return out.strip()

    def stderr(self) -> str:
        self.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def join(name: str, rank: int) -> Member:
    m = Member(name, str(rank))
    assert m.line() == "joined"
    return m


def caught(fn: Any, *args: Any) -> BaseException:
    """The exception ``fn(*args)`` raises (fails the test if none)."""
    try:
        fn(*args)
    except Exception as e:
        return e
    raise AssertionError(f"{fn} did not raise")


def until(cond: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def owned() -> int:
    return rpc.get_debug_info()["num_owner_rrefs"]


@pytest.fixture(scope="module")
def group() -> Iterator[Member]:
    """This process hosts the group as ``ps``; ``m1`` (rank 1) stays in it throughout."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    with environ(env):
        rpc.init_rpc("ps", rank=0, world_size=None)
        members: list[Member] = []
        try:
            members.append(join("m1", 1))
            yield members[0]
        finally:
            for m in members:
                with contextlib.suppress(Exception):
                    rpc.rpc_sync("m1", T.leave, timeout=5)
                    m.proc.wait(20)
                m.kill()
            rpc.shutdown(timeout=30)
    os.environ.update(saved)


# ---------------------------------------------------------------- join
def test_a_joined_member_is_listed_here(group):
    assert [w.name for w in rpc.get_worker_infos()] == ["ps", "m1"]
    assert rpc.get_worker_info("m1") == rpc.WorkerInfo("m1", 1)


def test_a_joined_member_lists_the_group(group):
    assert rpc.rpc_sync("m1", T.names) == ["ps", "m1"]


def test_calls_reach_a_joined_member(group):
    assert rpc.rpc_sync("m1", T.square, args=(7,)) == 49


def test_refused_joins(group):
    """A taken name, a taken rank, a fixed-size worker and a wrong secret are refused."""
    m = Member("--refusals", "m1", "1")
    got = {}
    for _ in range(4):
        rec = json.loads(m.line())
        got[rec["case"]] = (rec["type"], rec["message"])
    assert m.proc.wait(30) == 0
    assert got["name"][0] == "ValueError" and "'m1' is taken" in got["name"][1], got
    assert got["rank"][0] == "ValueError" and "rank 1 is taken" in got["rank"][1], got
    assert got["fixed"][0] == "MixedGroupError" and "mixes fixed-size" in got["fixed"][1], got
    assert got["secret"][0] == "PermissionError" and "secret" in got["secret"][1], got
    assert [w.name for w in rpc.get_worker_infos()] == ["ps", "m1"]


# ---------------------------------------------------------------- leave
@pytest.fixture(scope="module")
def left(group) -> dict[str, Any]:
    """``m3`` joins, holds an RRef owned here, and leaves with ``rpc.shutdown()``."""
    base = owned()
    m = join("m3", 3)
    rpc.rpc_sync("m3", T.hold_remote, args=("ps", 3))
    held = owned()
    rpc.rpc_async("m3", T.leave)
    said = m.line()
    code = m.proc.wait(30)
    return {
        "base": base,
        "held": held,
        "said": said,
        "code": code,
        "names": [w.name for w in rpc.get_worker_infos()],
        "owned_after": owned(),
        "call": caught(rpc.rpc_sync, "m3", T.square, (2,)),
    }


def test_a_leaving_member_shuts_down_cleanly(left):
    assert (left["said"], left["code"]) == ("left", 0)


def test_a_member_that_left_is_not_listed(left):
    assert left["names"] == ["ps", "m1"]


def test_calls_to_a_member_that_left_fail_naming_it(left):
    e = left["call"]
    assert isinstance(e, rpc.RpcPeerError) and "'m3'" in str(e) and "left" in str(e), e


def test_a_leaving_member_releases_the_rrefs_it_held(left):
    assert left["held"] == left["base"] + 1
    assert left["owned_after"] == left["base"]


# ---------------------------------------------------------------- die, replace
@pytest.fixture(scope="module")
def killed(group) -> dict[str, Any]:
    """``m2`` joins, takes part in calls, RRefs and a dist-autograd context; then SIGKILL."""
    base = owned()
    m = join("m2", 2)
    # m2 holds forks of three values owned here: made by its remote(), given by this
    # worker, and passed on by m1 (which keeps its own fork of that one).
    rpc.rpc_sync("m2", T.hold_remote, args=("ps", 4))
    rpc.rpc_sync("m2", T.keep, args=(rpc.RRef(np.arange(2)),))
    rpc.rpc_sync("m1", T.hold_remote, args=("ps", 5))
    rpc.rpc_sync("m1", T.pass_on, args=("m2",))
    held = owned()
    their_ctx = rpc.rpc_sync("m2", T.open_context_on, args=("ps",))  # never left by m2
    ctx_here = their_ctx in _context.active_context_ids()
    theirs = rpc.remote("m2", T.square, args=(5,))  # owned by m2
    assert theirs.to_here() == 25
    live = RemoteModule("m1/cpu", tp.nn.Linear, args=(3, 1))  # a module whose owner stays
    doomed = RemoteModule("m2/cpu", tp.nn.Linear, args=(3, 1))
    live_opt = DistributedOptimizer(optax.sgd(0.1), live.remote_parameters())
    both_opt = DistributedOptimizer(
        optax.sgd(0.1), live.remote_parameters() + doomed.remote_parameters()
    )
    ctx = dist_autograd.context()
    ctx_id = ctx.__enter__()
    x = tp.ones(2, 3, requires_grad=True)
    loss = doomed(x).sum()
    pending = rpc.rpc_async("m2", T.nap, args=(60,))
    t0 = time.monotonic()
    m.kill()
    try:
        pending.wait(30)
        pending_err: BaseException | None = None
    except Exception as e:
        pending_err = e
    pending_s = time.monotonic() - t0
    gone = until(lambda: "m2" not in [w.name for w in rpc.get_worker_infos()])
    out = {
        "pending": pending_err,
        "pending_s": pending_s,
        "gone": gone,
        "call": caught(rpc.rpc_sync, "m2", T.square, (2,)),
        "to_here": caught(theirs.to_here),
        "backward": caught(dist_autograd.backward, ctx_id, [loss]),
        "base": base,
        "held": held,
        "released": until(lambda: owned() == base + 1),  # m1's stays
        "ctx_here": ctx_here,
        "ctx_released": until(lambda: their_ctx not in _context.active_context_ids()),
        "both_opt": both_opt,
        "live": live,
        "live_opt": live_opt,
    }
    replacement = join("m2", 2)
    out["replacement_call"] = rpc.rpc_sync("m2", T.square, args=(6,))
    out["replacement_names"] = [w.name for w in rpc.get_worker_infos()]
    out["old_rref_after_replacement"] = caught(theirs.to_here)
    out["backward_after_replacement"] = caught(dist_autograd.backward, ctx_id, [loss])
    ctx.__exit__(None, None, None)
    rpc.rpc_async("m2", T.leave)
    assert replacement.line() == "left" and replacement.proc.wait(30) == 0
    return out


def test_a_pending_call_to_a_killed_member_fails_at_once_naming_it(killed):
    e = killed["pending"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e), e
    assert killed["pending_s"] < 2.0


def test_a_killed_member_is_removed_from_the_group(killed):
    assert killed["gone"]


def test_calls_to_a_killed_member_fail_naming_it_as_dead(killed):
    e = killed["call"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e) and "died" in str(e), e


def test_an_rref_owned_by_a_killed_member_fails_its_user_naming_it(killed):
    e = killed["to_here"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e) and "died" in str(e), e


def test_rrefs_a_killed_member_held_are_released_on_their_owner(killed):
    assert killed["held"] == killed["base"] + 3
    assert killed["released"]


def test_a_context_a_killed_member_created_is_released_here(killed):
    assert killed["ctx_here"] and killed["ctx_released"]


def test_a_context_a_killed_member_took_part_in_fails_backward_naming_it(killed):
    e = killed["backward"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e) and "died" in str(e), e


def test_a_context_of_a_killed_member_fails_backward_after_its_replacement_joined(killed):
    e = killed["backward_after_replacement"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e) and "died" in str(e), e


def test_an_optimizer_over_a_killed_members_parameters_fails_naming_it(killed):
    with dist_autograd.context() as ctx_id:
        dist_autograd.backward(ctx_id, [killed["live"](tp.ones(2, 3)).sum()])
        e = caught(killed["both_opt"].step, ctx_id)
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e), e


def test_a_step_that_fails_on_a_killed_owner_has_finished_on_the_live_one(killed):
    bias = killed["live"].remote_parameters()[1]
    before = float(np.asarray(bias.to_here().numpy()).item())
    with dist_autograd.context() as ctx_id:
        dist_autograd.backward(ctx_id, [killed["live"](tp.ones(2, 3)).sum()])  # d/d bias = 2
        caught(killed["both_opt"].step, ctx_id)
        after = float(np.asarray(bias.to_here().numpy()).item())
    assert after == pytest.approx(before - 0.2, abs=1e-5)


def test_remote_module_and_optimizer_keep_working_for_live_owners(killed):
    live = killed["live"]
    bias = live.remote_parameters()[1]
    before = float(np.asarray(bias.to_here().numpy()).item())
    with dist_autograd.context() as ctx_id:
        dist_autograd.backward(ctx_id, [live(tp.ones(2, 3)).sum()])  # d/d bias = 2
        killed["live_opt"].step(ctx_id)
    after = float(np.asarray(bias.to_here().numpy()).item())
    assert after == pytest.approx(before - 0.2, abs=1e-5)


def test_a_replacement_takes_a_killed_members_name(killed):
    assert killed["replacement_call"] == 36
    assert killed["replacement_names"] == ["ps", "m1", "m2"]


def test_an_rref_of_the_killed_member_still_fails_after_its_replacement_joined(killed):
    e = killed["old_rref_after_replacement"]
    assert isinstance(e, rpc.RpcPeerError) and "'m2'" in str(e) and "died" in str(e), e
