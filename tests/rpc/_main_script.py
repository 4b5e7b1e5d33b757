"""A main script in tensorplay's shape, started by the launcher (see test_main_script.py).

Every worker runs this file as ``__main__``. Its functions and classes must go
to the other workers by name and run there with that worker's own globals: its
``RANK``, its parameter server behind its ``threading.Lock``. With ``--other``
the peers run a different script (a copy with another source), so the same
functions must travel by value, and the one that holds a lock must fail with a
clear error.

Run: ``python -m tensorplay_jax.run --nproc 2 tests/rpc/_main_script.py`` with
``TPJ_TEST_OUT`` set: each rank hands back what each check saw (``tests._worker.hand_back``,
after ``rpc.shutdown()``) for the test to compare.
"""

import os
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tests._worker import hand_back

RANK = int(os.environ["RANK"])
WORLD_SIZE = int(os.environ["WORLD_SIZE"])
SAME_SCRIPT = "--other" not in sys.argv
PEER = f"w{(RANK + 1) % WORLD_SIZE}"
PEER_RANK = (RANK + 1) % WORLD_SIZE


def my_rank() -> int:
    return RANK


calls_here = 0


def count_call() -> int:
    global calls_here
    calls_here += 1
    return calls_here


# --- The parameter-server tutorial's shape: a global server behind a global lock.


class ParameterServer:
    created = 0

    def __init__(self) -> None:
        ParameterServer.created += 1
        self.rank = RANK
        self.steps = 0
        self.lock = threading.Lock()

    def step(self) -> int:
        with self.lock:
            self.steps += 1
            return self.steps


param_server = None
global_lock = threading.Lock()
trainers_done = threading.Event()


def get_parameter_server() -> ParameterServer:
    global param_server
    with global_lock:
        if not param_server:
            param_server = ParameterServer()
        return param_server


def server_state() -> tuple[int, int, int]:
    return ParameterServer.created, param_server.steps, param_server.rank


def trainer_done() -> None:
    trainers_done.set()


# --- JAX transformations defined in the script.


@jax.custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(_, g):
    return (jnp.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@jax.jit
def scaled(x):
    return x * 10.0


def clipped_grad_plus_rank(x):
    g = jax.grad(lambda v: jnp.sum(clip_gradient(v) * 3.0))(x)
    return np.asarray(scaled(g)) + RANK


# --- Classes defined in the script, as remote() values and RemoteModules.


class Counter:
    def __init__(self, start: int) -> None:
        self.value = start
        self.rank = RANK

    def add(self, n: int) -> int:
        self.value += n
        return self.value


class Scale(tp.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor
        self.rank = RANK

    def forward(self, x):
        return x * self.factor + self.rank


def scale_by_rank(t):
    return t * (RANK + 2.0)


SEEN: dict[str, object] = {}  # check name -> what this rank saw (handed back at the end)


def see(name: str, value: object) -> None:
    SEEN[name] = value.tolist() if isinstance(value, np.ndarray) else value


def same_script_checks() -> None:
    got = rpc.rpc_sync(PEER, my_rank)
    see("rank-is-callee", got)
    counts = [rpc.rpc_sync(PEER, count_call) for _ in range(3)]
    see("globals-persist", counts)

    # Both workers are trainers of one server on w0 (w0 reaches itself too).
    ps = rpc.remote("w0", get_parameter_server)
    for _ in range(2):
        ps.rpc_sync().step()
    if RANK != 0:
        rpc.rpc_sync("w0", trainer_done)
    else:
        see("trainers-finished", trainers_done.wait(60))
        created, steps, owner = rpc.rpc_sync("w0", server_state)
        see("one-parameter-server", [created, steps, owner])

    x = np.array([0.5, -2.0, 4.0], np.float32)
    got = rpc.rpc_sync(PEER, clipped_grad_plus_rank, args=(x,))
    see("custom-vjp-and-jit", got)
    see("jit-by-name", np.asarray(rpc.rpc_sync(PEER, scaled, args=(x,))))

    counter = rpc.remote(PEER, Counter, args=(5,))
    see("remote-class", counter.rpc_sync().add(2))
    value = counter.to_here()
    see("class-comes-back", [type(value).__name__, getattr(value, "rank", None)])

    module = RemoteModule(f"{PEER}/cpu", Scale, args=(2.0,))
    out = module.forward(tp.ones(3))
    see("remote-module", np.asarray(out.detach().value))

    # Distributed autograd through a script function: d(sum(t * (r + 2)))/dt = r + 2 (callee's r).
    with dist_autograd.context() as ctx_id:
        t = tp.ones(3, requires_grad=True)
        loss = rpc.rpc_sync(PEER, scale_by_rank, args=(t,)).sum()
        dist_autograd.backward(ctx_id, [loss])
        grad = np.asarray(dist_autograd.get_gradients(ctx_id)[t])
    see("dist-autograd", grad)


def other_script_checks() -> None:
    got = rpc.rpc_sync(PEER, my_rank)
    see("by-value-rank-is-caller", got)
    try:
        rpc.rpc_sync(PEER, get_parameter_server)
    except TypeError as e:
        see("clear-error", str(e))
    else:
        see("clear-error", None)


def main() -> None:
    rpc.init_rpc(f"w{RANK}", rank=RANK, world_size=WORLD_SIZE)
    try:
        same_script_checks() if SAME_SCRIPT else other_script_checks()
    finally:
        rpc.shutdown()
    hand_back(SEEN)


if __name__ == "__main__":
    main()
