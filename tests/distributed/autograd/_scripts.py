"""The prelude every distributed autograd worker script in these tests starts with."""

import textwrap

PRELUDE = """
import os, sys, threading, time
import numpy as np
import jax, jax.numpy as jnp
import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests.distributed.autograd import _targets as T
rank = int(os.environ["RANK"])
ws = int(os.environ["WORLD_SIZE"])


def expect(exc_type, substrings, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        for s in substrings:
            assert s in str(e), (s, str(e))
        return e
    raise AssertionError(f"{fn} did not raise {exc_type}")


def wait_until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
"""


def script(body: str) -> str:
    """The prelude followed by ``body`` (dedented)."""
    return PRELUDE + textwrap.dedent(body)
