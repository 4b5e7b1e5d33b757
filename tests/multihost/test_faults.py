"""Faults across hosts: a host's processes killed mid-call, a host cut off the network.

The survivor's calls end within a bound with an error naming the worker; nothing hangs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests._procs import reported
from tests.multihost import _workers as W


def _wait_for(path: Path, job: threading.Thread, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert job.is_alive(), f"the job ended before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.05)


def test_killed_host_and_cut_link(cluster, on_hosts, tmp_path):
    got: dict = {}

    def job() -> None:
        try:
            got["res"] = on_hosts(
                W.faults, [0, 1, 2], timeout=120, env={"TPJ_TMP": str(tmp_path)},
                allow_exit={1: -9},
            )  # fmt: skip
        except BaseException as e:  # reported by the test thread below
            got["error"] = e

    t = threading.Thread(target=job, daemon=True)
    t.start()
    try:
        _wait_for(tmp_path / "kill-now", t, 90)
        time.sleep(0.5)  # the call is on the wire
        assert cluster.kill(1), "nothing ran on host 1"
        _wait_for(tmp_path / "cut-now", t, 60)
        cluster.link(2, up=False)
        (tmp_path / "cut").write_text("")
        t.join(60)
    finally:
        cluster.link(2, up=True)
        t.join(30)
        if t.is_alive():
            for h in range(3):
                cluster.kill(h)
    assert "error" not in got, got.get("error")
    faults = reported(got["res"][0])
    assert faults["ranks"] == [1, 2], faults
    # the call to the killed host fails within a bound, naming the worker
    killed = faults["killed"]
    assert killed is not None, "a call to a killed host returned"
    assert killed["type"] == "RpcPeerError" and killed["s"] < 20, killed
    assert "w1" in killed["message"], killed
    # the call to the host cut off fails within its timeout (4 s) plus slack
    cut = faults["cut"]
    assert cut is not None, "a call to a host that is cut off returned"
    assert cut["type"] in ("RpcTimeoutError", "RpcPeerError") and cut["s"] < 4 + 5, cut
    assert "w2" in cut["message"], cut
