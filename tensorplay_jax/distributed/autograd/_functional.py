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

Run eagerly under ``jax.grad``/``jax.vjp`` the call works on concrete values
in the thread's context. Under ``jax.jit`` it runs in ``jax.pure_callback``
(give ``out_shape=``) in a private context of its own. A private context
(no ``with context()`` around the call, or under jit) is released after its
backward; one whose backward never runs stays until process exit.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed.autograd import _context, _engine
from tensorplay_jax.rpc import WorkerInfo, rpc_sync
from tensorplay_jax.runtime.device import on_device
from tensorplay_jax.tensors import Tensor

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


def _traced(vals: tuple[Any, ...]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in vals)


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def differentiable_rpc(
    to: str | int | WorkerInfo,
    func: Any,
    args: tuple | list = (),
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
    *,
    out_shape: Any = None,
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
        out_shape: a pytree of ``jax.ShapeDtypeStruct`` matching ``func``'s
            result; needed only under ``jax.jit``, where the call runs in
            ``jax.pure_callback`` on XLA's thread (in a private context: the
            arguments' gradients come back to JAX, remote leaves' gradients
            are not kept).

    Returns:
        ``func``'s result with Tensors replaced by arrays.

    Raises:
        TypeError: traced values (under ``jax.jit``) without ``out_shape``.
        ValueError: the result does not match ``out_shape``.

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

    def host_call(vals: tuple[Any, ...]) -> Any:
        (a, k), _ = assemble(vals, False)
        return _arrays(rpc_sync(to, func, args=a, kwargs=k, timeout=timeout))

    def host_fwd(vals: tuple[Any, ...], cid: int | None) -> tuple[Any, int]:
        private = cid is None
        if cid is None:
            cid = _context.new_context_id()
        ctx = _context.lookup(cid, create=True)
        (a, k), wrappers = assemble(vals, True)
        with _context.using(cid):
            out = rpc_sync(to, func, args=a, kwargs=k, timeout=timeout)
        handle = next(_handles) & 0x7FFFFFFF
        outs = jax.tree_util.tree_leaves(out, is_leaf=_is_tensor)
        with _records_lock:
            _records[handle] = (ctx, private, wrappers, outs)
        return _arrays(out), handle

    def host_bwd(handle: int, cts: list[Any]) -> tuple[Any, ...]:
        with _records_lock:
            ctx, private, wrappers, outs = _records.pop(handle)
        roots, grads = [], []
        for t, g in zip(outs, cts, strict=True):
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
        return tuple(on_device(got[w]) if w in got else jnp.zeros_like(w.value) for w in wrappers)

    # Under jit the host functions run in jax.pure_callback: shapes must be declared.
    in_specs: list[jax.ShapeDtypeStruct] = []

    def out_specs() -> tuple[list[jax.ShapeDtypeStruct], Any]:
        if out_shape is None:
            raise TypeError(
                "differentiable_rpc: called with traced values (inside jax.jit or another "
                "staging transformation) without out_shape=; pass the result's shapes, e.g. "
                "out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), or call it eagerly"
            )
        return jax.tree_util.tree_flatten(out_shape)

    def host_flat(out: Any, specs: list[jax.ShapeDtypeStruct]) -> list[np.ndarray]:
        flat = jax.tree_util.tree_leaves(out)
        got = [(tuple(np.shape(x)), np.result_type(x)) for x in flat]
        want = [(tuple(sp.shape), np.dtype(sp.dtype)) for sp in specs]
        if got != want:
            raise ValueError(
                f"differentiable_rpc: {_name(func)} returned {got} (shape, dtype), "
                f"but out_shape declares {want}"
            )
        return [np.asarray(x) for x in flat]

    @jax.custom_vjp
    def call(*vals: Any) -> Any:
        if not _traced(vals):
            return host_call(vals)
        specs, tree = out_specs()
        flat = jax.pure_callback(lambda *v: host_flat(host_call(v), specs), specs, *vals)
        return jax.tree_util.tree_unflatten(tree, flat)

    def fwd(*vals: Any) -> tuple[Any, jax.Array]:
        if not _traced(vals):
            out, handle = host_fwd(vals, _context.current_id())
            return out, jnp.asarray(handle, jnp.int32)
        specs, tree = out_specs()
        in_specs[:] = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in vals]

        def run(*v: Any) -> list[np.ndarray]:
            out, handle = host_fwd(v, None)  # XLA's thread: a private context
            return [*host_flat(out, specs), np.asarray(handle, np.int32)]

        res = jax.pure_callback(run, [*specs, jax.ShapeDtypeStruct((), jnp.int32)], *vals)
        return jax.tree_util.tree_unflatten(tree, res[:-1]), res[-1]

    def bwd(handle: jax.Array, ct: Any) -> tuple[Any, ...]:
        cts = jax.tree_util.tree_leaves(ct)
        if not isinstance(handle, jax.core.Tracer):
            return host_bwd(int(handle), cts)

        def run(h: Any, *c: Any) -> list[np.ndarray]:
            return [np.asarray(g) for g in host_bwd(int(h), list(c))]

        return tuple(jax.pure_callback(run, list(in_specs), handle, *cts))

    call.defvjp(fwd, bwd)
    return call(*[leaves[i] for i in diff])
