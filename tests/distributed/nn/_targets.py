"""Modules and interfaces the RemoteModule tests build on their owners (importable there)."""

from __future__ import annotations

import tensorplay_jax as tp
from tensorplay_jax.distributed.nn.api import interface


class Scaled(tp.nn.Module):
    """``scale * fc(x) + shift``, with kwargs, a second method and a mode-dependent output."""

    def __init__(self, d_in: int, d_out: int, *, scale: float = 1.0) -> None:
        super().__init__()
        self.fc = tp.nn.Linear(d_in, d_out)
        self.scale = scale
        self.calls = 0

    def forward(self, x, shift=0.0):
        self.calls += 1
        return self.fc(x) * self.scale + shift

    def count(self) -> int:
        return self.calls

    def project(self, x, *, bias=True):
        return self.fc(x) if bias else x @ self.fc.weight.T

    def mode(self) -> bool:
        return self.training

    def add_scale(self, delta: float) -> float:
        self.scale += delta
        return self.scale


@interface
class ScaledInterface:
    def forward(self, x, shift=0.0): ...

    def project(self, x, *, bias=True): ...

    def count(self) -> int: ...

    def add_scale(self, delta: float) -> float: ...


@interface
class NeedsReset:
    def forward(self, x): ...

    def reset(self) -> None: ...


@interface
class WrongArgs:
    def forward(self, x, shift, gamma): ...


def not_a_module(*args):
    return [1, 2, 3]


def call_remote_module(rm, x):
    """Run on a third worker: use a RemoteModule that arrived over RPC."""
    assert rm._parameters == {} and rm._modules == {}  # Module state exists on a decoded handle
    return rm(x, shift=1.0), rm.on.name, rm.remote_parameters()[0].owner_name()


def identity(x):
    return x


def grads_of(context_id, param_rrefs):
    """Run on the owner: the gradients of these parameters in the context (None if absent)."""
    import numpy as np

    from tensorplay_jax.distributed import autograd as dist_autograd

    grads = dist_autograd.get_gradients(context_id)
    out = []
    for r in param_rrefs:
        g = grads.get(r.local_value())
        out.append(None if g is None else np.asarray(g))
    return out


def local_grads(param_rrefs):
    """Run on the owner: the parameters' local ``.grad`` (distributed backward leaves it alone)."""
    return [r.local_value().grad for r in param_rrefs]


def backward_on_third(rm, x):
    """Run on a third worker: a differentiable forward and backward through a RemoteModule."""
    from tensorplay_jax.distributed import autograd as dist_autograd
    from tensorplay_jax.distributed import rpc

    prefs = rm.remote_parameters()
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [rm(x).sum()])
        return rpc.rpc_sync(rm.on, grads_of, args=(ctx, prefs))
