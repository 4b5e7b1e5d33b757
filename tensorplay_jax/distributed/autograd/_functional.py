"""Functional mode: an RPC that JAX differentiates (``jax.grad``, ``jax.vjp``, ``jit``, ``vmap``).

``differentiable_rpc(to, func, args)`` is a ``jax.custom_vjp`` around one
remote call. Its floating-point array arguments are the differentiable
inputs; what ``func`` is decides the mode, chosen by the caller:

* ``mode="jax"`` (the default): ``func`` is a plain JAX function. The callee
  takes ``jax.vjp`` of it, compiled once per shape and kept (``_remote_vjp``);
  the forward message returns the result, the backward message sends the
  cotangents and gets the gradients. Under ``jax.jit``/``jax.vmap`` the call
  runs in ``jax.pure_callback``, its result shape from ``jax.eval_shape`` of
  ``func`` here unless ``out_shape=`` gives it; under ``vmap`` one message
  carries the whole batch and the callee ``vmap``-s ``func``.
* ``mode="tape"``: ``func`` is tensorplay code (Tensor ops, RRef-held
  parameters, further RPCs). The arguments become leaf Tensors that require
  grad and the call runs in a distributed autograd context: the thread's, the
  one given as ``context_id=``, or a private one (released after its
  backward); the backward is a distributed backward pass from the call's
  outputs (``_engine.run_pass``). Gradients of leaves elsewhere (a parameter
  read from an RRef) accumulate in the context on their owners, as in tape
  mode, for ``get_gradients`` and ``DistributedOptimizer.step``.

A private context whose backward never runs stays until process exit. In
mode ``"jax"`` an unused pullback (``jax.vjp`` never applied; under
``jax.checkpoint`` the forward runs again in the backward pass, so the first
run's pullback waits unused) stays on the callee until ``MAX_PENDING`` newer
ones push it out. The callee compiles once per function object. A function
that travels by value (a lambda, a closure, a notebook cell's function the
callee cannot import) is unpickled once per distinct pickle (the callee caches
by its bytes), so it too is compiled once, unless its pickle changes from call
to call (a closure over values that change).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed.autograd import _context, _engine, _remote_vjp
from tensorplay_jax.rpc import WorkerInfo, rpc_sync
from tensorplay_jax.runtime.device import on_device
from tensorplay_jax.tensors import Tensor

__all__ = ["context_id_array", "differentiable_rpc"]

_records: dict[int, tuple[Any, ...]] = {}
_records_lock = threading.Lock()
_handles = itertools.count(1)
_MODES = ("jax", "tape")


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
        lambda t: t.value if isinstance(t, Tensor) else jnp.asarray(t), out, is_leaf=_is_tensor
    )


def _traced(vals: tuple[Any, ...]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in vals)


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def context_id_array(context_id: int) -> np.ndarray:
    """A context id as a ``uint32[2]`` array, to pass into a jitted function.

    A context id has the worker's rank in its high bits and does not fit the
    int32 that ``jax.jit`` makes of a Python int; pass this array as an
    argument of the jitted step and on to ``differentiable_rpc(...,
    context_id=...)``, so one compiled step serves every context.

    Example:
        >>> context_id_array((3 << 48) + 7)
        array([196608,      7], dtype=uint32)
    """
    return np.array([context_id >> 32, context_id & 0xFFFFFFFF], np.uint32)


def _decode_cid(a: Any) -> int:
    hi, lo = (int(v) for v in np.asarray(a, np.uint64).reshape(-1, 2)[0])
    return (hi << 32) | lo


def differentiable_rpc(
    to: str | int | WorkerInfo,
    func: Any,
    args: tuple | list = (),
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
    *,
    mode: str = "jax",
    out_shape: Any = None,
    context_id: Any = None,
) -> Any:
    """``rpc_sync(to, func, args, kwargs)`` that ``jax.grad``, ``jit`` and ``vmap`` see through.

    Floating-point array leaves of ``args``/``kwargs`` (JAX or NumPy, at any
    depth of lists/tuples/dicts) are the differentiable inputs; every other
    leaf passes through unchanged. ``jax.grad``, ``jax.vjp``,
    ``jax.value_and_grad``, ``jax.jit``, ``jax.vmap`` (one call for the whole
    batch), ``jax.checkpoint`` and ``jax.test_util.check_grads(...,
    modes=["rev"])`` work through it; forward mode (``jax.jvp``,
    ``jax.jacfwd``) does not (it is a ``jax.custom_vjp``).

    The default mode is ``"jax"`` because this is the JAX-facing entry point:
    a JAX user's remote function is ``jax.numpy`` code, parameters passed as
    arguments and gradients returned (pure, so it composes with every
    transformation). Tape code, with parameters kept in RRefs on their owners,
    is the other design and names itself with ``mode="tape"``.

    Args:
        to: destination worker (name, rank or WorkerInfo).
        func: the function to run there.
        args: positional arguments.
        kwargs: keyword arguments.
        timeout: RPC timeout in seconds (-1: the default).
        mode: ``"jax"``: ``func`` is a JAX function of arrays, its VJP taken
            and kept on the callee (``func`` may read nothing that needs
            gradients besides its arguments); ``"tape"``: ``func`` is
            tensorplay code and sees the differentiable inputs as Tensors that
            require grad; gradients of leaves it reads elsewhere (RRef-held
            parameters) accumulate in the distributed autograd context on
            their owners.
        out_shape: a pytree of ``jax.ShapeDtypeStruct`` matching ``func``'s
            result, for ``jax.jit``/``jax.vmap`` (per example), where the call
            runs in ``jax.pure_callback``. Not needed in mode ``"jax"`` when
            ``jax.eval_shape(func, ...)`` works here; needed in mode
            ``"tape"``.
        context_id: mode ``"tape"``: the distributed autograd context to run
            the call in (an int, or :func:`context_id_array`'s array passed
            through ``jax.jit``), so that a jitted step trains RRef-held
            parameters: their gradients land there and
            ``DistributedOptimizer.step(context_id)`` applies them. Default:
            the thread's context when called eagerly, else a private one
            whose remote leaves' gradients are dropped.

    Returns:
        ``func``'s result, as arrays.

    Raises:
        TypeError: a Tensor argument in mode ``"jax"``; a mismatch between
            ``func`` and ``mode`` (the error names the mode to use); traced
            values without ``out_shape`` where it cannot be evaluated here;
            forward-mode differentiation.
        ValueError: an unknown ``mode``; ``context_id`` in mode ``"jax"``;
            the result does not match ``out_shape``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.distributed.autograd as dist_autograd
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("fdoc", rank=0, world_size=1,
        ...              rpc_backend_options=rpc.GrpcRpcBackendOptions(
        ...                  init_method="tcp://127.0.0.1:29575"))
        >>> def f(w, x):
        ...     return jnp.sum((x @ w) ** 2)
        >>> loss = lambda w, x: dist_autograd.differentiable_rpc("fdoc", f, args=(w, x))
        >>> w, x = jnp.eye(2), jnp.ones((1, 2))
        >>> jax.jit(jax.grad(loss))(w, x)
        Array([[2., 2.],
               [2., 2.]], dtype=float32)
        >>> def tape_loss(x):  # tensorplay code: mode="tape"
        ...     y = dist_autograd.differentiable_rpc("fdoc", tp.mul, args=(x, 3.0), mode="tape")
        ...     return jnp.sum(y * y)
        >>> jax.grad(tape_loss)(jnp.ones(2))
        Array([18., 18.], dtype=float32)
        >>> rpc.shutdown()
    """
    if mode not in _MODES:
        raise ValueError(f"differentiable_rpc: mode={mode!r}; expected 'jax' or 'tape'")
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs or {})), is_leaf=_is_tensor)
    if mode == "jax":
        if any(_is_tensor(x) for x in leaves):
            raise TypeError(
                f"differentiable_rpc(mode='jax'): the arguments of {_name(func)} hold a "
                "tensorplay Tensor, but mode='jax' calls a JAX function on arrays; pass "
                "arrays (t.value), or mode='tape' for tensorplay code"
            )
        if context_id is not None:
            raise ValueError(
                "differentiable_rpc: context_id= is for mode='tape' (tape code reading "
                "RRef-held parameters); in mode='jax' pass parameters as arguments and "
                "take their gradients from jax.grad"
            )
    diff = [i for i, x in enumerate(leaves) if _is_diff(x)]
    in_specs = [jax.ShapeDtypeStruct(np.shape(leaves[i]), leaves[i].dtype) for i in diff]
    nd = len(diff)
    ctx_ops = [] if context_id is None else [context_id]
    if isinstance(context_id, int):
        ctx_ops = [context_id_array(context_id)]

    def assemble(vals: tuple[Any, ...], requires_grad: bool | None) -> tuple[Any, list[Tensor]]:
        full = list(leaves)
        wrappers = []
        for i, v in zip(diff, vals, strict=True):
            if requires_grad is None:  # mode "jax": arrays
                full[i] = np.asarray(v) if isinstance(v, np.ndarray) else jnp.asarray(v)
                continue
            t = Tensor(jnp.asarray(v), requires_grad=requires_grad)
            full[i] = t
            wrappers.append(t)
        return jax.tree_util.tree_unflatten(tree, full), wrappers

    def batch_of(vals: tuple[Any, ...]) -> int:
        return np.ndim(vals[0]) - len(in_specs[0].shape) if vals else 0

    # ---------------------------------------------------------------- on the caller's host
    def host_call(vals: tuple[Any, ...]) -> Any:
        if mode == "jax":
            (a, k), _ = assemble(vals, None)
            fwd_args = (func, a, k, diff, batch_of(vals), False)
            return rpc_sync(to, _remote_vjp.forward, args=fwd_args, timeout=timeout)[0]
        (a, k), _ = assemble(vals, False)
        return _arrays(
            rpc_sync(to, _remote_vjp.tape_call, args=(func, *a), kwargs=k, timeout=timeout)
        )

    made: list[int] = []  # eager forwards' handles, dropped if forward mode fails the call

    def host_fwd(vals: tuple[Any, ...], cid: int | None) -> tuple[Any, int]:
        if mode == "jax":
            (a, k), _ = assemble(vals, None)
            fwd_args = (func, a, k, diff, batch_of(vals), True)
            out, handle = rpc_sync(to, _remote_vjp.forward, args=fwd_args, timeout=timeout)
            made.append(handle)
            return out, handle  # NumPy arrays, as they came
        private = cid is None
        if cid is None:
            cid = _context.new_context_id()
        ctx = _context.lookup(cid, create=True)
        (a, k), wrappers = assemble(vals, True)
        with _context.using(cid):
            out = rpc_sync(to, _remote_vjp.tape_call, args=(func, *a), kwargs=k, timeout=timeout)
        handle = next(_handles) & 0x7FFFFFFF
        outs = jax.tree_util.tree_leaves(out, is_leaf=_is_tensor)
        with _records_lock:
            _records[handle] = (ctx, private, wrappers, outs)
        made.append(handle)
        return _arrays(out), handle

    def drop(handle: int) -> None:
        if mode == "jax":
            rpc_sync(to, _remote_vjp.drop, args=(handle,), timeout=timeout)
            return
        with _records_lock:
            ctx, private, _, _ = _records.pop(handle)
        if private:
            _context.release(ctx.context_id, skip=None)

    def host_bwd(handle: int, cts: list[Any]) -> tuple[Any, ...]:
        if mode == "jax":
            return tuple(rpc_sync(to, _remote_vjp.backward, args=(handle, cts), timeout=timeout))
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

    # ---------------------------------------------------------------- staged: jit, vmap
    # Mode "jax" batches by expand_dims (the callee vmaps func over the batch: one call);
    # tape code is written per example, so mode "tape" runs one call per element.
    vmap_method = "expand_dims" if mode == "jax" else "sequential"

    def out_specs() -> tuple[list[jax.ShapeDtypeStruct], Any]:
        if out_shape is not None:
            return jax.tree_util.tree_flatten(out_shape)
        why = "mode='tape' runs tensorplay code, whose shapes are not evaluated here"
        if mode == "jax":

            def g(*vals: Any) -> Any:
                (a, k), _ = assemble(vals, None)
                return func(*a, **k)

            try:
                return jax.tree_util.tree_flatten(jax.eval_shape(g, *in_specs))
            except Exception as e:  # any failure: the caller cannot evaluate it
                why = f"jax.eval_shape of {_name(func)} failed here: {type(e).__name__}: {e}"
        raise TypeError(
            "differentiable_rpc: called with traced values (inside jax.jit, jax.vmap or "
            f"another staging transformation) without out_shape=, and {why}; pass the "
            "result's shapes, e.g. out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), or "
            "call it eagerly"
        )

    def host_flat(out: Any, specs: list[jax.ShapeDtypeStruct], batch: int) -> list[np.ndarray]:
        flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
        got = [(tuple(x.shape)[batch:], x.dtype) for x in flat]
        want = [(tuple(sp.shape), np.dtype(sp.dtype)) for sp in specs]
        if got != want:
            raise ValueError(
                f"differentiable_rpc: {_name(func)} returned {got} (shape, dtype), "
                f"but out_shape declares {want}"
            )
        return flat

    def tape_cid(ops: tuple[Any, ...], eager: bool) -> int | None:
        if ops:
            return _decode_cid(ops[0])
        return _context.current_id() if eager else None  # XLA's thread: a private context

    @jax.custom_vjp
    def call(*vals: Any) -> Any:
        vals, _ = vals[:nd], vals[nd:]
        if not _traced(vals):
            return _arrays(host_call(vals))
        specs, otree = out_specs()

        def run(*v: Any) -> list[np.ndarray]:
            return host_flat(host_call(v), specs, batch_of(v))

        flat = jax.pure_callback(run, specs, *vals, vmap_method=vmap_method)
        return jax.tree_util.tree_unflatten(otree, flat)

    def fwd(*vals: Any) -> tuple[Any, jax.Array]:
        vals, ops = vals[:nd], vals[nd:]
        if not _traced(vals) and not _traced(ops):
            out, handle = host_fwd(vals, tape_cid(ops, True))
            return _arrays(out), jnp.asarray(handle, jnp.int32)
        specs, otree = out_specs()

        def run(*v: Any) -> list[np.ndarray]:
            v, o = v[:nd], v[nd:]
            out, handle = host_fwd(v, tape_cid(o, False))
            batch = batch_of(v)
            flat = host_flat(out, specs, batch)
            lead = np.shape(flat[0])[:batch] if flat else ()
            return [*flat, np.full(lead, handle, np.int32)]

        hspec = jax.ShapeDtypeStruct((), jnp.int32)
        res = jax.pure_callback(run, [*specs, hspec], *vals, *ops, vmap_method=vmap_method)
        return jax.tree_util.tree_unflatten(otree, res[:-1]), res[-1]

    def bwd(handle: jax.Array, ct: Any) -> tuple[Any, ...]:
        cts = jax.tree_util.tree_leaves(ct)
        nones = (None,) * len(ctx_ops)
        if not isinstance(handle, jax.core.Tracer) and not _traced(tuple(cts)):
            return (*_arrays(host_bwd(int(handle), cts)), *nones)

        def run(h: Any, *c: Any) -> list[np.ndarray]:
            return [np.asarray(g) for g in host_bwd(int(np.asarray(h).flat[0]), list(c))]

        grads = jax.pure_callback(run, list(in_specs), handle, *cts, vmap_method=vmap_method)
        return (*grads, *nones)

    call.defvjp(fwd, bwd)
    try:
        return call(*[leaves[i] for i in diff], *ctx_ops)
    except TypeError as e:
        if "forward-mode" not in str(e):
            raise
        for handle in made:
            drop(handle)
        raise TypeError(
            f"differentiable_rpc({_name(func)}): forward-mode differentiation (jax.jvp, "
            "jax.jacfwd, jax.linearize) is not supported: the call is a jax.custom_vjp, "
            "which defines reverse mode only; use jax.grad, jax.vjp, jax.value_and_grad "
            "or jax.jacrev"
        ) from e
