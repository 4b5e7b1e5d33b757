"""The prelude every distributed.nn / optim worker script in these tests starts with."""

import textwrap

PRELUDE = """
import os, sys, time
import numpy as np
import jax, jax.numpy as jnp
import optax
import tensorplay_jax as tp
from tensorplay_jax.distributed import rpc
rank = int(os.environ["RANK"])
ws = int(os.environ["WORLD_SIZE"])


def npa(t):
    return np.asarray(t.detach().value if isinstance(t, tp.Tensor) else t)


def expect(exc_type, substrings, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        for s in substrings:
            assert s in str(e), (s, str(e))
        return e
    raise AssertionError(f"{fn} did not raise {exc_type}")
"""


def script(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)
