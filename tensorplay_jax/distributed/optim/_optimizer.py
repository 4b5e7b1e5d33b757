"""``DistributedOptimizer``: an optimizer (a ``tensorplay_jax.optim`` class or an optax
transform) applied on every parameter owner at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import optax

from tensorplay_jax import optim
from tensorplay_jax.distributed.optim import _local
from tensorplay_jax.rpc import RpcError, RRef, WorkerInfo, rpc_async
from tensorplay_jax.runtime import trace
from tensorplay_jax.tensors import Tensor

__all__ = ["DistributedOptimizer"]


def _on_each(calls: list[tuple[WorkerInfo, Any, tuple]], what: str) -> list[Any]:
    """Run ``fn(*args)`` on each owner at once; return the results when all are done.

    A call that fails before it is sent (its owner left or died) is an error like any
    other: the calls already sent are still waited for, so nothing is left running
    on a live owner when this raises. The error keeps the RPC layer's class (an
    ``RpcPeerError`` for an owner that is gone), so callers catch it the same way
    whether the loss showed at sending or at the reply.
    """
    sent: list[tuple[WorkerInfo, Any]] = []
    for owner, fn, args in calls:
        try:
            sent.append((owner, rpc_async(owner, fn, args=args)))
        except Exception as e:
            sent.append((owner, e))
    results, errors = [], []
    for owner, fut in sent:
        if isinstance(fut, Exception):
            errors.append((owner, fut))
            continue
        try:
            results.append(fut.wait())
        except Exception as e:
            errors.append((owner, e))
    if errors:
        owner, first = errors[0]
        others = "".join(f"\nError {what} on worker {o.name}: {e}" for o, e in errors[1:])
        cls = type(first) if isinstance(first, RpcError) else RuntimeError
        raise cls(f"Error {what} on worker {owner.name}: {first}{others}") from first
    return results


def _spec(optimizer: Any, args: tuple, kwargs: dict) -> Any:
    """What each owner builds its local optimizer from: a transform, or (class, args, kwargs)."""
    if isinstance(optimizer, type) and issubclass(optimizer, optim.Optimizer):
        # built once here over a stand-in parameter: a bad argument raises here, with
        # its own class and message, before any owner is asked
        optimizer([Tensor(jnp.zeros(1), requires_grad=True)], *args, **kwargs)
        return _local.OptimizerClass(optimizer, tuple(args), dict(kwargs))
    if isinstance(optimizer, type) and optimizer.__module__.split(".")[0] == "torch":
        raise TypeError(
            f"DistributedOptimizer: optimizer is torch's {optimizer.__qualname__}; use "
            f"tensorplay_jax.optim.{optimizer.__qualname__} (from tensorplay_jax import optim)"
        )
    if callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None)):
        if args or kwargs:
            raise TypeError(
                "DistributedOptimizer: extra arguments are for an optimizer class "
                "(DistributedOptimizer(optim.SGD, rrefs, lr=0.1)); an optax transform "
                "carries its own (optax.sgd(0.1))"
            )
        return optimizer
    raise TypeError(
        "DistributedOptimizer: optimizer must be a tensorplay_jax.optim class (optim.SGD) or "
        f"an optax.GradientTransformation (optax.sgd(0.1)), got {optimizer!r}"
    )


# A dataclass so that the RPC codec carries it by its fields: an optimizer passed to
# another worker (e.g. to each trainer) drives the same owner-side state.
@dataclasses.dataclass(init=False, repr=False, eq=False)
class DistributedOptimizer:
    """Apply an optimizer to parameters spread over workers, each on its owner.

    As tensorplay's: ``DistributedOptimizer(optim.SGD, param_rrefs, lr=0.05)``
    builds ``optim.SGD(its_params, lr=0.05)`` on each owner (any
    ``tensorplay_jax.optim`` class, with its arguments), so a distributed step is
    the class's local step on the same gradients. An optax transform
    (``DistributedOptimizer(optax.sgd(0.05), param_rrefs)``) works too: each owner
    then keeps that transform's state per parameter.

    Parameters are grouped by owner; each owner keeps a local optimizer.
    ``step(context_id)`` asks every owner at once to read its gradients from the
    distributed-autograd context and update its parameters in place; it returns
    when all are done. Parameters without a gradient in the context stay
    unchanged (state included). Steps that reach one owner concurrently (several
    trainers) run one at a time.
    State is per parameter, as in tensorplay's optimizers. The optimizer can be
    passed over RPC (to several trainers): every copy drives the same owner-side
    state.

    Args:
      optimizer: a ``tensorplay_jax.optim.Optimizer`` subclass (``optim.SGD``,
        ``optim.Adam``...), or an ``optax.GradientTransformation`` (``optax.sgd(0.1)``,
        a chain, ...); it travels to every owner (by reference or by value).
      params_rref: RRefs of the parameters (``RemoteModule.remote_parameters()``,
        ``RRef(param)`` for local ones).
      *args: the class's arguments after its parameters (none for a transform).
      **kwargs: the class's keyword arguments (``lr=0.05``; none for a transform).

    Raises:
      TypeError: ``optimizer`` is neither (a ``torch.optim`` class gets the
        ``tensorplay_jax.optim`` name to use), arguments given with a transform, or
        ``params_rref`` is not a non-empty sequence of RRefs of Tensors.
      ValueError: the class refuses its arguments (``lr=-1``), raised here before
        any owner is asked.
      RuntimeError: "Error creating optimizer on worker NAME: ..." when an owner fails.

    Example (one worker owning everything; in a real job the model's owner is
    another worker)::

      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> import tensorplay_jax.distributed.autograd as dist_autograd
      >>> from tensorplay_jax.distributed import rpc
      >>> from tensorplay_jax.distributed.nn import RemoteModule
      >>> rpc.init_rpc("ps", rank=0, world_size=1)
      >>> model = RemoteModule("ps/cpu", tp.nn.Linear, args=(3, 1))
      >>> opt = DistributedOptimizer(optim.SGD, model.remote_parameters(), lr=0.1)
      >>> bias = model.remote_parameters()[1]
      >>> before = bias.to_here().item()
      >>> with dist_autograd.context() as ctx:
      ...     loss = model(tp.ones(2, 3)).sum()   # d loss / d bias = 2
      ...     dist_autograd.backward(ctx, [loss])
      ...     opt.step(ctx)
      >>> round(before - bias.to_here().item(), 4)  # moved by lr * 2
      0.2
      >>> rpc.shutdown()
    """

    remote_optimizers: list[tuple[WorkerInfo, RRef[Any]]]

    def __init__(
        self,
        optimizer: type[optim.Optimizer] | optax.GradientTransformation,
        params_rref: Sequence[RRef[Any]],
        *args: Any,
        **kwargs: Any,
    ):
        spec = _spec(optimizer, args, kwargs)
        params_rref = list(params_rref) if not isinstance(params_rref, RRef) else [params_rref]
        if not params_rref:
            raise TypeError("DistributedOptimizer: params_rref is empty; pass at least one RRef")
        for r in params_rref:
            if not isinstance(r, RRef):
                raise TypeError(
                    f"DistributedOptimizer: params_rref must hold RRefs, got "
                    f"{type(r).__qualname__}; use RemoteModule.remote_parameters() or RRef(param)"
                )
        by_owner: dict[str, tuple[WorkerInfo, list[RRef[Any]]]] = {}
        for r in params_rref:
            by_owner.setdefault(r.owner_name(), (r.owner(), []))[1].append(r)
        owners = list(by_owner.values())
        refs = _on_each(
            [(owner, _local.new_local_optimizer, (spec, rrefs)) for owner, rrefs in owners],
            "creating optimizer",
        )
        self.remote_optimizers = [(o, ref) for (o, _), ref in zip(owners, refs, strict=True)]

    def step(self, context_id: int) -> None:
        """Update every owner's parameters from their gradients in ``context_id``, concurrently.

        Args:
          context_id: the id from ``with dist_autograd.context() as context_id``.

        Raises:
          RuntimeError: "Error running optimizer on worker NAME: ..." (the owner's
            error, chained) when any owner fails; the others have applied their step
            when it is raised. For an owner that left or died it is an ``RpcPeerError``
            (a ``RuntimeError``) with the same message.
        """
        if isinstance(context_id, bool) or not isinstance(context_id, int):
            raise TypeError(
                f"DistributedOptimizer.step: context_id must be the int from "
                f"dist_autograd.context(), got {context_id!r}"
            )
        span = trace.begin("DistributedOptimizer.step", "optim") if trace.RECORDING else None
        try:
            _on_each(
                [(o, _local.local_step, (ref, context_id)) for o, ref in self.remote_optimizers],
                "running optimizer",
            )
        finally:
            if span is not None:
                owners = [o.name for o, _ in self.remote_optimizers]
                span.end(context_id=context_id, owners=owners)

    def __repr__(self) -> str:
        owners = ", ".join(o.name for o, _ in self.remote_optimizers)
        return f"DistributedOptimizer(owners=[{owners}])"
