"""Functional mode: an RPC that JAX differentiates (``jax.grad``, ``jax.vjp``, ``value_and_grad``).

``differentiable_rpc(to, func, args)`` is a ``jax.custom_vjp`` around one
distributed-autograd RPC:

* forward: the array arguments become leaf Tensors that require grad, the
  call runs inside the thread's distributed autograd context (or a private
  one), and the result comes back as arrays; the residual is a handle to the
  recorded call;
* backward: the cotangents start a distributed backward pass from the
  call's outputs (``_engine.run_pass``). Gradients of the argument wrappers
  come back to JAX; gradients of leaves elsewhere (a parameter the remote
  function reads from an RRef, say) accumulate in the context on their
  owners, as in tape mode, so ``get_gradients(ctx_id)`` there shows them.

The forward needs concrete values: it works under ``jax.grad``/``jax.vjp``
run eagerly, not under ``jax.jit``/``vmap`` (the call raises a TypeError
that says so). A private context (no ``with context()`` around the call) is
released after its backward; one whose backward never runs stays until
process exit.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import Tensor
from tensorplay_jax.distributed.autograd import _context, _engine
from tensorplay_jax.rpc import WorkerInfo, rpc_sync

__all__ = ["differentiable_rpc"]

_records: dict[int, tuple[Any, ...]] = {}
_records_lock = threading.Lock()
_handles = itertools.count(1)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)


def _is_diff(x: Any) -> bool:
    if isinstance(x, Tensor):
        return False
    if isinstance(x, jax.Array | np.ndarray | jax.core.Tracer):
        return bool(jnp.issubdtype(x.dtype, jnp.inexact))
    return False


def _arrays(out: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda t: t.value if isinstance(t, Tensor) else t, out, is_leaf=_is_tensor
    )


def _check_concrete(vals: tuple[Any, ...]) -> None:
    for v in vals:
        if isinstance(v, jax.core.Tracer):
            raise TypeError(
                f"differentiable_rpc: got a traced value ({v.aval.str_short()}) inside "
                "jax.jit/jax.vmap or another staging transformation; an RPC needs concrete "
                "values: call differentiable_rpc under an eager jax.grad/jax.vjp/"
                "jax.value_and_grad (jit the local parts instead)"
            )


def differentiable_rpc(
    to: str | int | WorkerInfo,
    func: Any,
    args: tuple | list = (),
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
) -> Any:
    """``rpc_sync(to, func, args, kwargs)`` that ``jax.grad``/``jax.vjp`` can differentiate.

    Floating-point array leaves of ``args``/``kwargs`` (JAX or NumPy, at any
    depth of lists/tuples/dicts) are the differentiable inputs: ``func`` sees
    them as Tensors that require grad, so it is tensorplay code (Tensor ops,
    ``tp.apply``, ``@tp.function``-lifted JAX functions, modules, RRef-held
    parameters, further RPCs). Every other leaf passes through unchanged.
    Tensor results come back as ``jax.Array`` s.

    Args:
        to: destination worker (name, rank or WorkerInfo).
        func: the function to run there.
        args: positional arguments.
        kwargs: keyword arguments.
        timeout: RPC timeout in seconds (-1: the default).

    Returns:
        ``func``'s result with Tensors replaced by arrays.

    Raises:
        TypeError: called with traced values (inside ``jax.jit``/``vmap``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.distributed.autograd as dist_autograd
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("fdoc", rank=0, world_size=1,
        ...              rpc_backend_options=rpc.GrpcRpcBackendOptions(
        ...                  init_method="tcp://127.0.0.1:29575"))
        >>> def loss(x):
        ...     y = dist_autograd.differentiable_rpc("fdoc", tp.mul, args=(x, 3.0))
        ...     return jnp.sum(y * y)
        >>> jax.grad(loss)(jnp.ones(2))
        Array([18., 18.], dtype=float32)
        >>> rpc.shutdown()
    """
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs or {})), is_leaf=_is_tensor)
    diff = [i for i, x in enumerate(leaves) if _is_diff(x)]

    def assemble(vals: tuple[Any, ...], requires_grad: bool) -> tuple[Any, list[Tensor]]:
        full = list(leaves)
        wrappers = []
        for i, v in zip(diff, vals, strict=True):
            t = Tensor(jnp.asarray(v), requires_grad=requires_grad)
            full[i] = t
            wrappers.append(t)
        return jax.tree_util.tree_unflatten(tree, full), wrappers

    @jax.custom_vjp
    def call(*vals: Any) -> Any:
        _check_concrete(vals)
        (a, k), _ = assemble(vals, False)
        return _arrays(rpc_sync(to, func, args=a, kwargs=k, timeout=timeout))

    def fwd(*vals: Any) -> tuple[Any, jax.Array]:
        _check_concrete(vals)
        cid = _context.current_context_id()
        private = cid is None
        if private:
            cid = _context.new_context_id()
        ctx = _context.get_or_create(cid)
        (a, k), wrappers = assemble(vals, True)
        prev = getattr(_context._tls, "context_id", None)
        _context._tls.context_id = cid
        try:
            out = rpc_sync(to, func, args=a, kwargs=k, timeout=timeout)
        finally:
            _context._tls.context_id = prev
        handle = next(_handles) & 0x7FFFFFFF
        with _records_lock:
            _records[handle] = (
                ctx,
                private,
                wrappers,
                jax.tree_util.tree_leaves(out, is_leaf=_is_tensor),
            )
        return _arrays(out), jnp.asarray(handle, jnp.int32)

    def bwd(handle: jax.Array, ct: Any) -> tuple[Any, ...]:
        with _records_lock:
            ctx, private, wrappers, outs = _records.pop(int(handle))
        roots, grads = [], []
        for t, g in zip(outs, jax.tree_util.tree_leaves(ct), strict=True):
            if isinstance(t, Tensor) and t.requires_grad:
                roots.append(t)
                grads.append(jnp.asarray(g, t.dtype))
        mine = {w: None for w in wrappers}
        got: dict[Tensor, jax.Array] = {}

        def accumulate(leaf: Tensor, g: jax.Array) -> None:
            if leaf in mine:
                got[leaf] = g if leaf not in got else got[leaf] + g
            else:
                ctx.accumulate(leaf, g)

        try:
            if roots:
                _engine.run_pass(ctx, roots, grads, retain_graph=False, accumulate=accumulate)
        finally:
            if private:
                _context.release(ctx.context_id, skip=None)
        return tuple(got.get(w, jnp.zeros_like(w.value)) for w in wrappers)

    call.defvjp(fwd, bwd)
    return call(*[leaves[i] for i in diff])
