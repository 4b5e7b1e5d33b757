"""Clear errors: before init, bad arguments, mismatches across ranks, non-members, missing peers.

Messages are asserted by substring. Multi-rank errors run in 2 real processes; each
rank must raise the same error (no rank left waiting), after which the group works.
"""

import re

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tests._procs import free_port, run_workers


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.all_reduce(np.ones(2)),
        lambda: dist.broadcast(np.ones(2), src=0),
        lambda: dist.send(np.ones(2), dst=1),
        lambda: dist.get_rank(),
        lambda: dist.get_world_size(),
        lambda: dist.barrier(),
        lambda: dist.new_group([0]),
        lambda: dist.destroy_process_group(),
    ],
)
def test_call_before_init_process_group_raises(call):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"call tensorplay_jax\.distributed\.init_process_group"):
        call()


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        ({"backend": "mpi"}, ValueError, "backend='mpi' is not supported"),
        ({"engine": "fast"}, ValueError, "engine='fast' is not one of"),
        ({"init_method": "file:///tmp/x"}, ValueError, "use 'env://' or 'tcp://host:port'"),
        ({"init_method": "tcp://127.0.0.1"}, ValueError, "must look like 'tcp://host:port'"),
        ({"init_method": "env://"}, ValueError, "needs MASTER_ADDR and MASTER_PORT"),
        (
            {"init_method": "tcp://127.0.0.1:1", "rank": 3, "world_size": 2},
            ValueError,
            "need 0 <= rank < world_size, got rank=3, world_size=2",
        ),
        ({"timeout": -1}, ValueError, "timeout=-1 must be a positive number"),
    ],
)
def test_init_process_group_rejects_bad_arguments(monkeypatch, kwargs, exc, msg):
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(exc, match=re.escape(msg)):
        dist.init_process_group(**{"backend": "gloo", **kwargs})
    assert not dist.is_initialized()


ERRORS = r"""
import os, sys
import numpy as np
import jax.numpy as jnp
import tensorplay_jax.distributed as dist
from tensorplay_jax.runtime.settings import PG_SHM_DEPTH

port = int(sys.argv[1])
r = int(os.environ["RANK"])


def expect(exc, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert text in str(e), f"expected {text!r} in {e!r}"
        return
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}({text!r})")


for i, engine in enumerate(("shm", "xla")):
    if i == 0:
        dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", 30, 2, r, engine=engine)
    else:
        dist.init_process_group("gloo", timeout=30, engine=engine)
    expect(RuntimeError, "already initialized", dist.init_process_group, "gloo")
    x = jnp.ones(4)
    expect(ValueError, "all_reduce: shape mismatch across ranks (rank 0: (2,), rank 1: (3,))",
           dist.all_reduce, np.ones(2 + r, np.float32))
    expect(ValueError, "all_gather: dtype mismatch across ranks",
           dist.all_gather, np.ones(2, [np.float32, np.int32][r]))
    expect(ValueError, "different collectives (rank 0: all_reduce, rank 1: all_gather)",
           dist.all_reduce if r == 0 else dist.all_gather, x)
    expect(ValueError, "reduce: ranks disagree on src/dst (rank 0: 0, rank 1: 1)",
           dist.reduce, x, dst=r)
    if engine == "xla":
        expect(ValueError, "broadcast: ranks disagree on src/dst (rank 0: 0, rank 1: 1)",
               dist.broadcast, x, src=r)
        expect(ValueError, "broadcast: shape mismatch across ranks",
               dist.broadcast, np.ones(2 + r, np.float32), src=0)
    else:
        # A small broadcast's src does not wait for the receivers: its disagreement
        # surfaces on the receivers at once and on the src at its next call, which
        # then runs on no rank.
        dist.broadcast(x, src=r)  # both think they are src: neither waits
        expect(ValueError, "all_reduce: not run, because an earlier call this rank made as src",
               dist.all_reduce, x)
        if r == 0:
            dist.broadcast(np.ones(2, np.float32), src=0)
        else:
            expect(ValueError, "shape mismatch across ranks (rank 0: (2,), rank 1: (3,))",
                   dist.broadcast, np.ones(3, np.float32), src=0)
        expect(ValueError, "all_gather: not run, because an earlier call",
               dist.all_gather, x)
        # A src running broadcasts ahead validates each at the latest PG_SHM_DEPTH - 1
        # calls later; the calls in between run, the one that finds it runs nowhere.
        if r == 0:
            dist.broadcast(np.ones(2, np.float32), src=0)
        else:
            expect(ValueError, "shape mismatch across ranks",
                   dist.broadcast, np.ones(3, np.float32), src=0)
        for _ in range(PG_SHM_DEPTH - 2):
            assert float(dist.broadcast(x * (1 + r), src=0)[0]) == 1.0
        expect(ValueError, "broadcast: not run, because an earlier call",
               dist.broadcast, x, src=0)
        assert float(dist.all_reduce(x)[0]) == 2.0  # and the group works on
    expect(ValueError, "broadcast: src=5 is out of range; valid ranks are 0..1",
           dist.broadcast, x, src=5)
    expect(ValueError, "reduce: dst=-1 is out of range", dist.reduce, x, dst=-1)
    expect(TypeError, "gather: dst=0.0 must be an int rank", dist.gather, x, dst=0.0)
    expect(ValueError, "scatter: tensor must have a leading axis of the group size 2",
           dist.scatter, np.ones((3, 2)), src=0)
    expect(ValueError, "does not match what the others send it",
           dist.all_to_all_single, np.ones((4, 2)), [1, 3] if r == 0 else None)
    expect(ValueError, "input_split_sizes=[1, 1] sum to 2, but tensor has 4 rows",
           dist.all_to_all_single, np.ones(4), None, [1, 1])
    expect(TypeError, "all_reduce: op='avg' needs a floating or complex input",
           dist.all_reduce, np.ones(3, np.int32), op="avg")
    expect(ValueError, "all_reduce: unknown op='median'", dist.all_reduce, x, op="median")
    expect(ValueError, "send: dst=%d is this process's own rank" % r, dist.send, x, dst=r)
    if r == 0:
        expect(ValueError, "send: shape mismatch across ranks", dist.send, np.ones(2), dst=1)
    else:
        expect(ValueError, "recv: shape mismatch across ranks", dist.recv, np.ones(3), src=0)
    solo = dist.new_group([0])
    expect(ValueError, "new_group: ranks=[0, 7] must be distinct ranks in 0..1 ([7] out of range)",
           dist.new_group, [0, 7])
    if r == 1:
        expect(ValueError, "rank 1 is not a member of the group with ranks [0]",
               dist.all_reduce, x, group=solo)
    else:
        expect(ValueError, "broadcast: src=1 is not a member of the group [0]",
               dist.broadcast, x, src=1, group=solo)
        np.testing.assert_allclose(dist.all_reduce(x, group=solo), x)
    # Validation errors leave the group usable.
    np.testing.assert_allclose(dist.all_reduce(x), 2 * x)
    dist.destroy_process_group()
    expect(RuntimeError, "has not been initialized", dist.all_reduce, x)
print("ERRORS-OK", r)
"""

MISSING = r"""
import os, sys, time
import numpy as np
import tensorplay_jax.distributed as dist

engine, mode = sys.argv[1], sys.argv[2]
r = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=2.0, engine=engine)
x = np.ones(1000, np.float32)
if r == 1:
    if mode == "exit":
        os._exit(0)  # dies without a word
    time.sleep(7)  # alive, but never joins
    sys.exit(0)
if mode == "stuck":
    t0 = time.monotonic()
    try:
        dist.barrier(timeout=1.0)
        raise AssertionError("barrier did not time out")
    except TimeoutError as e:
        assert "barrier: timed out after 1s" in str(e), e
    assert time.monotonic() - t0 < 4, time.monotonic() - t0
if mode == "exit":  # never wait for the lost peer at the runtime's shutdown barrier
    sys.excepthook = lambda *a: (sys.__excepthook__(*a), os._exit(1))
t0 = time.monotonic()
try:
    dist.all_reduce(x)
    raise AssertionError("all_reduce did not fail")
except (TimeoutError, RuntimeError) as e:
    took = time.monotonic() - t0
    msg = str(e)
print("FAILED-WITH", type(msg).__name__, repr(msg), round(took, 2), flush=True)
assert took < 5.0, took
if mode == "exit" and engine == "shm":
    assert "all_reduce: rank 1 (pid" in msg and "exited" in msg, msg
else:
    assert "all_reduce: timed out" in msg and "rank(s) [1]" in msg, msg
try:
    dist.all_reduce(x)
except RuntimeError as e:
    assert "unusable after an earlier failure" in str(e), e
else:
    raise AssertionError("a broken group ran a collective")
print("MISSING-OK", flush=True)
if mode == "exit":
    os._exit(0)
"""


def test_mismatches_and_bad_arguments_raise_on_every_rank():
    port = free_port()
    res = run_workers(ERRORS, 2, args=[str(port)], timeout=180)
    for w in res:
        assert f"ERRORS-OK {w.rank}" in w.stdout, str(w)


@pytest.mark.parametrize("engine", ["shm", "xla"])
@pytest.mark.parametrize("mode", ["stuck", "exit"])
def test_missing_peer_fails_within_timeout(engine, mode):
    res = run_workers(MISSING, 2, args=[engine, mode], timeout=60, check=False)
    assert "MISSING-OK" in res[0].stdout, str(res[0])
    assert res[0].returncode == 0, str(res[0])
    if mode == "stuck":  # the late rank itself is unharmed
        assert res[1].returncode == 0, str(res[1])
