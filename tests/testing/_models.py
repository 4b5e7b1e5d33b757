"""Models whose gradients ``check_dist_grads`` checks: remote functions run on the workers.

Every function here is an ordinary tensorplay function; the losses call other workers
through ``rpc.rpc_sync`` / ``rpc.remote``, as user code does.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.autograd import attach_outputs, make_node
from tensorplay_jax.distributed import rpc


def rand(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ remote functions
def layer(w: Any, x: Any) -> Any:
    return tp.tanh(x @ w)


def forward_on(to: str, w: Any, x: Any) -> Any:
    """Nested RPC: this worker runs ``layer`` on ``to`` and adds a residual."""
    return rpc.rpc_sync(to, layer, args=(w, x)) + x * 0.5


def make_param(seed: int, *shape: int) -> tp.Tensor:
    """A parameter its owner keeps in an RRef."""
    return tp.tensor(rand(seed, *shape), requires_grad=True)


def use_param(rref: rpc.RRef, x: Any) -> Any:
    return tp.tanh(x @ rref.local_value())


def scaled_square(x: Any, factor: float) -> Any:
    """``x ** 2`` with a hand-written backward, off by ``factor`` (1.0 is right)."""
    if not isinstance(x, tp.Tensor) or not x.requires_grad:  # no tape: the forward only
        return x * x

    def backward(grads: Any) -> Any:
        (g,) = grads
        return (g * 2.0 * x.value * factor,)

    node = make_node(backward, [x], name="ScaledSquareBackward")
    return attach_outputs(node, [x.value * x.value])[0]


def jax_stage(w: Any, x: Any) -> Any:
    """A plain JAX function for ``differentiable_rpc``."""
    return jnp.tanh(x @ w)


# ------------------------------------------------------------------ losses
def two_hops(w: Any, x: Any) -> Any:
    """worker1 then worker2, the same weight used twice."""
    h = rpc.rpc_sync("worker1", layer, args=(w, x))
    return (rpc.rpc_sync("worker2", layer, args=(w, h)) ** 2).sum()


def nested(params: dict[str, Any], x: Any) -> Any:
    """worker1 calls worker2 inside its function; a dict of parameters; a pytree output."""
    h = rpc.rpc_sync("worker1", forward_on, args=("worker2", params["w1"], x))
    back = rpc.rpc_sync("worker0", layer, args=(params["w2"], h))  # a call to self
    return {"out": back, "aux": [h.sum()]}


def with_remote(w: Any, x: Any) -> Any:
    """``remote`` + ``to_here`` and ``rpc_async``."""
    rref = rpc.remote("worker2", layer, args=(w, x))
    fut = rpc.rpc_async("worker1", layer, args=(w, rref.to_here()))
    return fut.wait() * 2.0


def rref_params(p1: rpc.RRef, p2: rpc.RRef, x: Any) -> Any:
    """Parameters held by their owners (worker1, worker2) in RRefs: a parameter server."""
    h = rpc.rpc_sync("worker1", use_param, args=(p1, x))
    return rpc.rpc_sync("worker2", use_param, args=(p2, h)).sum()


def wrong_backward(x: Any) -> Any:
    return rpc.rpc_sync("worker1", scaled_square, args=(x, 1.5)).sum()


def right_backward(x: Any) -> Any:
    return rpc.rpc_sync("worker1", scaled_square, args=(x, 1.0)).sum()


def functional(w: Any, x: Any) -> Any:
    """JAX mode: plain JAX code on arrays, a stage on worker1 through ``differentiable_rpc``."""
    h = dist_autograd.differentiable_rpc("worker1", jax_stage, args=(w, x))
    return jnp.sum(jnp.tanh(h @ w) ** 2)


def right_backward_jax(w: Any, x: Any) -> Any:
    """JAX mode, a plain JAX stage on worker2."""
    return jnp.sum(dist_autograd.differentiable_rpc("worker2", jnp.multiply, args=(w, x)) ** 2)
