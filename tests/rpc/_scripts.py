"""The prelude every RPC worker script in these tests starts with."""

PRELUDE = """
import gc, os, sys, time, warnings
import numpy as np
import jax.numpy as jnp
from tensorplay_jax.distributed import rpc
from tests.rpc import _targets as T
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


def wait_until(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
"""


def script(body: str) -> str:
    import textwrap

    return PRELUDE + textwrap.dedent(body)
