"""The pytest plugin's worker jobs over real processes: run, errors, dead workers, bounded waits.

The fixtures (``dist_workers``) and the ``Workers`` class behind them, and the plugin
as a user meets it: a test file run by pytest in a subprocess (``pytester``).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time

import pytest

from tensorplay_jax.distributed import rpc
from tensorplay_jax.testing import WorkerDied, Workers
from tests._procs import REPO_ROOT
from tests.testing import _workers as W

pytest_plugins = ["pytester"]


def plugin_args() -> list[str]:
    """``-p`` for the plugin, unless the installed package's entry point already loads it."""
    eps = importlib.metadata.entry_points(group="pytest11", name="tensorplay_jax")
    return [] if eps else ["-p", "tensorplay_jax_pytest"]


@pytest.mark.workers(3, names=["ps", "trainer1", "trainer2"])
def test_runs_test_functions_on_named_workers(dist_workers):
    assert dist_workers.names == ["ps", "trainer1", "trainer2"]
    name, pid = dist_workers.run("trainer2", W.whoami)
    assert name == "trainer2" and pid != os.getpid()
    assert dist_workers.run("ps", W.whoami) == ("ps", os.getpid())  # this process is rank 0
    every = dist_workers.run_all(W.whoami)
    assert {n: v[0] for n, v in every.items()} == {n: n for n in dist_workers.names}
    assert dist_workers.run("trainer1", lambda a, b=1: a + b, 40, b=2) == 42  # by value
    assert dist_workers.run("trainer1", divmod, 7, 2) == (3, 1)


def test_a_remote_exception_surfaces_with_its_traceback(dist_workers):
    with pytest.raises(ValueError) as e:
        dist_workers.run("worker1", W.boom, "here")
    msg = str(e.value)
    for part in ["boom on purpose: here", "Remote traceback", "'worker1'", "in boom"]:
        assert part in msg, msg
    assert dist_workers.run("worker1", abs, -1) == 1  # the worker keeps serving
    with pytest.raises(ValueError, match=r"no worker named 'worker9'.*\['worker0', 'worker1'\]"):
        dist_workers.run("worker9", abs, 1)


def test_a_worker_that_dies_is_reported_with_its_output():
    workers = Workers(2, timeout=20).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerDied) as e:
        workers.run("worker1", W.last_words_then_exit, 3)
    assert time.monotonic() - t0 < 20
    msg = str(e.value)
    assert "worker 'worker1' (rank 1) exited with code 3" in msg, msg
    assert "last words before the crash" in msg, msg
    with pytest.raises(WorkerDied, match="died during the test"):
        workers.close()  # nobody killed it on purpose: closing says so too
    assert not rpc.is_initialized()


def test_a_killed_worker_is_reported_and_teardown_stays_quiet(dist_workers):
    pid = dist_workers.run("worker1", W.whoami)[1]
    dist_workers.kill("worker1")
    with pytest.raises(OSError):
        os.kill(pid, 0)  # gone
    with pytest.raises(WorkerDied, match=r"worker 'worker1' \(rank 1\) exited with code -9"):
        dist_workers.run("worker1", abs, -1)


@pytest.mark.workers(2, timeout=3)
def test_every_wait_is_bounded(dist_workers):
    # The sleeps outlast the 8 s check (an unbounded wait fails it), and no more: the
    # job's graceful shutdown at teardown waits for them to end.
    t0 = time.monotonic()
    with pytest.raises(rpc.RpcTimeoutError):
        dist_workers.run("worker1", time.sleep, 9)
    assert time.monotonic() - t0 < 8
    with pytest.raises(rpc.RpcTimeoutError):
        dist_workers.run("worker1", time.sleep, 9, timeout=0.5)
    with pytest.raises((rpc.RpcTimeoutError, TimeoutError)):
        dist_workers.run_all(time.sleep, 9, timeout=0.5)


def test_bad_sizes():
    with pytest.raises(ValueError, match="n=0 must be at least 1"):
        Workers(0)
    with pytest.raises(ValueError, match="has 1 names, n=2"):
        Workers(2, names=["a"])


# ------------------------------------------------------------------ as a user meets it
def test_importing_the_plugin_imports_nothing_heavy():
    code = (
        "import sys, tensorplay_jax_pytest\n"
        "heavy = [m for m in ('jax', 'numpy', 'tensorplay_jax', 'grpc') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


USER_TESTS = """
import os, time
import pytest
from tensorplay_jax.distributed import rpc

pytestmark = pytest.mark.workers(2)

def square(x):
    return x * x

def fails_remotely():
    raise LookupError("missing on the worker")

def test_square(dist_workers_module):
    assert dist_workers_module.run("worker1", square, 7) == 49

def test_remote_failure(dist_workers_module):
    dist_workers_module.run("worker1", fails_remotely)

@pytest.mark.timeout(8)
def test_hangs_past_the_pytest_timeout(dist_workers_module, tmp_path_factory):
    pids = [pid for _, pid in dist_workers_module.run_all(WHOAMI).values()]
    with open(os.environ["TPJ_PIDS_FILE"], "w") as f:
        f.write(" ".join(map(str, pids)))
    rpc.rpc_sync("worker1", time.sleep, args=(60,), timeout=0)
""".replace("WHOAMI", "__import__('tests.testing._workers', fromlist=['w']).whoami")


def test_a_user_test_file_under_pytest(pytester, monkeypatch, tmp_path):
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("TPJ_PIDS_FILE", str(pids_file))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    pytester.makepyfile(test_user=USER_TESTS)
    t0 = time.monotonic()
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*LookupError: missing on the worker*", "*Remote traceback*"])
    result.stdout.fnmatch_lines(["*Timeout*"])
    assert time.monotonic() - t0 < 200
    # the workers did not outlive the job that the timed-out test's teardown closed
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2 and pids[0] != pids[1]
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids[1:]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids[1:]), pids


def test_the_plugin_can_be_disabled(pytester):
    pytester.makepyfile(test_off="def test_off(dist_workers):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:tensorplay_jax", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*fixture 'dist_workers' not found*"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False
