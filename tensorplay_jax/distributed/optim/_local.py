"""The owner's side of DistributedOptimizer: a local optimizer per owner and a locked step.

The local optimizer is either per-parameter optax state (``LocalOptimizer``, for an
optax transform) or a ``tensorplay_jax.optim`` class built here from its arguments
(``ClassOptimizer``), whose ``apply_gradients`` is the same update as its ``step``.

Every local optimizer of a process steps under one lock (``STEP_LOCK``), as
tensorplay's do: each trainer of a parameter server makes its own
``DistributedOptimizer``, so the server holds one local optimizer per trainer over the
same parameters, and two of their steps at once would each read a parameter, update it
and write it back, one update overwriting the other.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import jax
import optax

from tensorplay_jax import optim
from tensorplay_jax.autograd import no_grad
from tensorplay_jax.optim.updates import update_each
from tensorplay_jax.rpc import RRef
from tensorplay_jax.runtime import trace, xla_options
from tensorplay_jax.tensors import Tensor

STEP_LOCK = threading.Lock()  # every local optimizer's step in this process (module doc)

__all__ = [
    "STEP_LOCK",
    "ClassOptimizer",
    "LocalOptimizer",
    "OptimizerClass",
    "new_local_optimizer",
    "local_step",
]


class LocalOptimizer:
    """The parameters one owner holds, an optax state per parameter, and a lock.

    Each parameter has its own state (``tx.init`` of that parameter), as
    tensorplay's optimizers keep per-parameter state: a parameter without a
    gradient in a step is skipped (value and state unchanged). A transform
    that couples parameters (``clip_by_global_norm``) therefore sees one
    parameter at a time. Steps are serialised by ``STEP_LOCK``; the update of all
    parameters that have gradients is one jitted call per device they are on
    (each gradient first put on its parameter's device), so parameters on
    several devices each step where they are.
    """

    def __init__(self, tx: optax.GradientTransformation, params: Sequence[Tensor]) -> None:
        self.tx = tx
        self.params = list(params)
        self.states = [tx.init(p.value) for p in self.params]
        self._update = xla_options.jit(lambda g, s, p: update_each(tx, g, s, p))

    def step(self, grads: dict[Any, Any]) -> int:
        """Apply the update to every parameter that has a gradient in ``grads``; how many did."""
        with STEP_LOCK:
            idx = [i for i, p in enumerate(self.params) if p in grads]
            if not idx:
                return 0
            by_device: dict[Any, list[int]] = {}
            for i in idx:
                by_device.setdefault(_placement(self.params[i].value), []).append(i)
            for where, group in by_device.items():
                gs = [_on(_array(grads[self.params[i]]), where) for i in group]
                ps = [self.params[i].value for i in group]
                new_ps, new_ss = self._update(gs, [self.states[i] for i in group], ps)
                with no_grad():
                    for i, p, s in zip(group, new_ps, new_ss, strict=True):
                        self.params[i].data = p
                        self.states[i] = s
            return len(idx)


@dataclasses.dataclass(frozen=True)
class OptimizerClass:
    """A ``tensorplay_jax.optim`` class and the arguments each owner builds it with."""

    cls: type[optim.Optimizer]
    args: tuple
    kwargs: dict


class ClassOptimizer:
    """A ``tensorplay_jax.optim`` optimizer over one owner's parameters, stepped under a lock.

    Built from the class and its arguments on the owner, so the update is the
    class's own: a distributed step equals a local ``step()`` on the same gradients.
    It writes as the optax path does (``p.data = new``, no version bump): trainers'
    graphs recorded before a step still run backward, on the values they saved.
    """

    def __init__(
        self, cls: type[optim.Optimizer], params: Sequence[Tensor], args: tuple, kwargs: dict
    ) -> None:
        self.optimizer = cls(list(params), *args, **kwargs)

    def step(self, grads: dict[Any, Any]) -> int:
        """Apply the update to every parameter that has a gradient in ``grads``; how many did."""
        with STEP_LOCK:
            return self.optimizer.apply_gradients(grads, stale_check=False)


def _array(g: Any) -> Any:
    return g.value if isinstance(g, Tensor) else g


def _placement(value: Any) -> Any:
    """The sharding a committed parameter is on (None: uncommitted, JAX's default device)."""
    return value.sharding if isinstance(value, jax.Array) and value.committed else None


def _on(g: Any, where: Any) -> Any:
    """Gradient ``g`` on the parameter's sharding ``where`` (None: as it is)."""
    if where is None or (isinstance(g, jax.Array) and g.sharding == where):
        return g
    return jax.device_put(g, where)


def new_local_optimizer(
    tx: optax.GradientTransformation | OptimizerClass,
    param_rrefs: Sequence[RRef[Any]],
) -> RRef[LocalOptimizer | ClassOptimizer]:
    """Build the local optimizer on this worker (the owner of every RRef); return an RRef to it.

    ``tx`` is an optax transform, or the optimizer class with its arguments.
    """
    params = [r.local_value() for r in param_rrefs]
    for r, p in zip(param_rrefs, params, strict=True):
        if not isinstance(p, Tensor):
            raise TypeError(
                f"DistributedOptimizer: {r!r} holds a {type(p).__qualname__}, not a Tensor "
                "parameter (use RemoteModule.remote_parameters() or RRef(param))"
            )
    if isinstance(tx, OptimizerClass):
        return RRef(ClassOptimizer(tx.cls, params, tx.args, tx.kwargs))
    return RRef(LocalOptimizer(tx, params))


def local_step(opt_rref: RRef[LocalOptimizer | ClassOptimizer], context_id: int) -> int:
    """One step of this owner's LocalOptimizer from its gradients in ``context_id``."""
    from tensorplay_jax.distributed.autograd.api import gradient_arrays

    grads = gradient_arrays(context_id)  # arrays, as the jitted update takes them
    with trace.span("DistributedOptimizer.step (owner)", "optim", context_id=context_id):
        return opt_rref.local_value().step(grads)
