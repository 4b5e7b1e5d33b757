"""The optional native yield-spin of same-host readers (``rpc/_spin.c``)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time

import pytest

from tensorplay_jax.rpc._socket import spinner
from tests._procs import REPO_ROOT

try:
    from tensorplay_jax.rpc import _spin
except ImportError:
    _spin = None


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_the_extension_is_built_where_a_compiler_is():
    # Optional for users without a C compiler (readers then block at once); a machine
    # with one must have built it, or the install lost the speed-up silently.
    if _spin is None:
        assert _compiler() is None, (
            "tensorplay_jax.rpc._spin is missing although a C compiler is installed: "
            "reinstall with `pip install -e .` and read the build output"
        )
        pytest.skip("no C compiler: the optional extension is not built")
    assert spinner._SPIN is _spin.spin_readable


needs_spin = pytest.mark.skipif(_spin is None, reason="optional extension not built")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@needs_spin
def test_ready_socket_returns_at_once(pair):
    a, b = pair
    b.send(b"x")
    t0 = time.perf_counter()
    assert _spin.spin_readable(a.fileno(), 2_000_000_000) == _spin.READY
    assert time.perf_counter() - t0 < 0.5


@needs_spin
def test_spins_for_its_budget_then_gives_up(pair):
    a, _ = pair
    t0 = time.perf_counter()
    assert _spin.spin_readable(a.fileno(), 50_000_000) == _spin.EXPIRED  # 50 ms
    took = time.perf_counter() - t0
    assert 0.05 <= took < 2.0, took
    assert _spin.spin_readable(a.fileno(), 0) == _spin.BUSY  # no budget: no spin


@needs_spin
def test_data_arriving_during_the_spin_ends_it(pair):
    a, b = pair
    threading.Timer(0.05, b.send, args=(b"x",)).start()
    t0 = time.perf_counter()
    assert _spin.spin_readable(a.fileno(), 5_000_000_000) == _spin.READY
    assert time.perf_counter() - t0 < 2.5


@needs_spin
def test_hang_up_ends_the_spin(pair):
    a, b = pair
    b.shutdown(socket.SHUT_RDWR)
    t0 = time.perf_counter()
    assert _spin.spin_readable(a.fileno(), 5_000_000_000) == _spin.READY  # then EOF
    assert time.perf_counter() - t0 < 0.5
    assert a.recv(1) == b""


@needs_spin
def test_spinning_releases_the_gil(pair):
    a, _ = pair
    count = 0
    stop = threading.Event()

    def count_up() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=count_up)
    t.start()
    time.sleep(0.01)
    before = count
    _spin.spin_readable(a.fileno(), 300_000_000)  # 0.3 s
    during = count - before
    stop.set()
    t.join()
    # With the GIL held, the counting thread could not run at all during the spin.
    assert during > 10_000, during


# Run in a fresh process (the cap is per process, and this one may run RPC links); it
# prints what it measured as JSON, and the test checks it.
CAP = """
import json, os, socket, threading, time
from tensorplay_jax.rpc import _spin
out = {}
socks = [socket.socketpair() for _ in range(_spin.MAX_SPINNERS + 1)]
spinning = [
    threading.Thread(target=_spin.spin_readable, args=(s[0].fileno(), 2_000_000_000))
    for s in socks[: _spin.MAX_SPINNERS]
]
for t in spinning:
    t.start()
time.sleep(0.5)
t0 = time.perf_counter()
out["one_more"] = _spin.spin_readable(socks[-1][0].fileno(), 2_000_000_000)
out["one_more_s"] = time.perf_counter() - t0
pid = os.fork()  # the child has no spinning threads, so its slots are free
if pid == 0:
    got = _spin.spin_readable(socks[-1][0].fileno(), 1_000_000)
    os._exit(0 if got == _spin.EXPIRED else 1)
out["child_status"] = os.waitpid(pid, 0)[1]
for t in spinning:
    t.join()
t0 = time.perf_counter()
out["after"] = _spin.spin_readable(socks[-1][0].fileno(), 100_000_000)
out["after_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""


@needs_spin
def test_at_most_max_spinners_spin_at_once():
    p = subprocess.run(
        [sys.executable, "-c", CAP], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["one_more"] == _spin.BUSY, got
    assert got["one_more_s"] < 0.5, got  # turned away at once, not after 2 s
    assert got["child_status"] == 0, ("a forked child inherited the spinner count", got)
    assert got["after"] == _spin.EXPIRED and got["after_s"] >= 0.1, got  # the slots are free


@pytest.mark.parametrize(
    "value, expect_ns", [("0", 0), ("250", 250_000), ("-3", 0), ("lots", None)]
)
def test_spin_budget_from_the_environment(monkeypatch, value, expect_ns):
    monkeypatch.setenv("TENSORPLAY_JAX_RPC_SPIN_US", value)
    fn, ns = spinner._spinner()
    if expect_ns is None:  # not a number: the default, with a warning
        expect_ns = int(spinner.RPC_SPIN_US * 1000)
    if _spin is None:
        assert (fn, ns) == (None, 0)
    else:
        assert ns == expect_ns
        assert (fn is None) == (expect_ns == 0)
