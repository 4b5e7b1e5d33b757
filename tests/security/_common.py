"""Small helpers the security tests' worker modules share."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``pred`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(POLL_S)
