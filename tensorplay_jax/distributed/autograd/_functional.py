"""Functional mode: an RPC that JAX differentiates (``jax.grad``, ``jax.vjp``, ``jit``, ``vmap``).

``differentiable_rpc(to, func, args)`` is a ``jax.custom_vjp`` around one
remote call. Its floating-point array arguments are the differentiable
inputs; what ``func`` is decides the mode, chosen by the caller:

* ``mode="jax"`` (the default): ``func`` is a plain JAX function. The callee
  takes ``jax.vjp`` of it, compiled once per shape and kept (``_remote_vjp``);
  the forward message returns the result, the backward message sends the
  cotangents and gets the gradients. Under ``jax.jit``/``jax.vmap`` the call
  runs in a host callback (``_callback.host_call``: on CPU a
  ``buffer_callback`` that copies the reply into XLA's output buffers), its
  result shape from ``jax.eval_shape`` of
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

Each mode is a strategy object (``_functional_modes``: ``JaxMode``,
``TapeMode``) behind one ``custom_vjp`` factory (``_custom_vjp``), which runs
the call on this host when its values are concrete and in a host callback
when they are traced. Forward mode is refused before
anything runs: JAX marks the values it differentiates forward as
``jax.interpreters.ad.JVPTracer``. Under ``testing.in_process_rpc`` (whose
agent runs calls here, on the very objects) ``func`` is called directly, so
that JAX differentiates it itself.

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

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters.ad import JVPTracer

from tensorplay_jax.distributed.autograd import _context
from tensorplay_jax.distributed.autograd._callback import host_call
from tensorplay_jax.distributed.autograd._functional_modes import (
    MODES,
    Call,
    Mode,
    NoShapes,
    arrays,
)
from tensorplay_jax.rpc import WorkerInfo, rpc_sync
from tensorplay_jax.rpc.internal import calls_run_here
from tensorplay_jax.runtime.shards import is_sharded
from tensorplay_jax.tensors import Tensor

__all__ = ["context_id_array", "differentiable_rpc"]

_HANDLE = jax.ShapeDtypeStruct((), jnp.int32)


def _is_diff(x: Any) -> bool:
    if isinstance(x, Tensor):
        return False
    if isinstance(x, jax.Array | np.ndarray | jax.core.Tracer):
        return bool(jnp.issubdtype(x.dtype, jnp.inexact))
    return False


def _traced(vals: Any) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in vals)


def _device_of(v: Any) -> Any:
    """The one device a committed JAX array is on, else ``None`` (NumPy, scalars, sharded)."""
    if isinstance(v, jax.Array) and getattr(v, "committed", False) and len(v.devices()) == 1:
        return next(iter(v.devices()))
    return None


def _placement_of(v: Any) -> Any:
    """Where a committed JAX array is: its device, or its sharding when it has several
    (else ``None``)."""
    if isinstance(v, jax.Array) and getattr(v, "committed", False) and is_sharded(v):
        return v.sharding
    return _device_of(v)


def _on_device_of(g: Any, like: Any) -> Any:
    """``g`` where ``like`` is when ``like`` is a committed array (on its device, or sharded
    as it is): JAX's rule that a gradient lives where its primal does (the callee replies
    with NumPy, or a sharded array by the device maps)."""
    where = _placement_of(like)
    if where is None or (isinstance(g, jax.Array) and g.sharding == where):
        return g
    return jax.device_put(g, where)


def _placed_like(out: Any, vals: Any) -> Any:
    """``out`` on the device its committed arguments share, as a JAX computation on them
    would be; left where it is when they have none or several."""
    devices = {d for d in map(_device_of, vals) if d is not None}
    if len(devices) != 1:
        return out
    (device,) = devices
    return jax.device_put(out, device)


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
            runs in a host callback. Not needed in mode ``"jax"`` when
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
        >>> rpc.init_rpc("fdoc", rank=0, world_size=1)
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
    if mode not in MODES:
        raise ValueError(f"differentiable_rpc: mode={mode!r}; expected 'jax' or 'tape'")
    strategy = MODES[mode]
    call = Call(to, func, timeout, (tuple(args), dict(kwargs or {})), _is_diff, out_shape)
    strategy.check(call, context_id)
    if calls_run_here():  # testing.in_process_rpc: JAX differentiates func itself
        return rpc_sync(to, strategy.run_here, args=(func, tuple(args), dict(kwargs or {})))
    vals = [call.leaves[i] for i in call.diff]
    if any(isinstance(v, JVPTracer) for v in vals):
        raise TypeError(
            f"differentiable_rpc({call.name}): forward-mode differentiation (jax.jvp, "
            "jax.jacfwd, jax.linearize) is not supported: the call is a jax.custom_vjp, "
            "which defines reverse mode only; use jax.grad, jax.vjp, jax.value_and_grad "
            "or jax.jacrev"
        )
    ops = [] if context_id is None else [context_id]
    if isinstance(context_id, int):
        ops = [context_id_array(context_id)]
    made = _Made()
    try:
        return _custom_vjp(call, strategy, len(ops), made)(*vals, *ops)
    except BaseException:
        for handle in made.close():  # their backward can no longer run
            with contextlib.suppress(Exception):  # the call's own error is the one to see
                strategy.drop(call, handle)
        raise
    finally:
        made.close()


class _Made:
    """The handles a call's eager forwards made while it ran (dropped if it fails)."""

    def __init__(self) -> None:
        self.handles: list[int] = []
        self.open = True  # under jax.jit the forwards run later, when nothing can fail them

    def add(self, handle: int) -> None:
        if self.open:
            self.handles.append(handle)

    def close(self) -> list[int]:
        self.open = False
        handles, self.handles = self.handles, []
        return handles


def _out_specs(call: Call, strategy: Mode) -> tuple[list, Any]:
    if call.out_shape is not None:
        return jax.tree_util.tree_flatten(call.out_shape)
    try:
        return strategy.result_shapes(call)
    except NoShapes as e:
        raise TypeError(
            "differentiable_rpc: called with traced values (inside jax.jit, jax.vmap or "
            f"another staging transformation) without out_shape=, and {e}; pass the "
            "result's shapes, e.g. out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), or "
            "call it eagerly"
        ) from None


def _tape_context(ops: Any, eager: bool) -> int | None:
    """Mode "tape"'s context: the one passed in, else the thread's when eager, else none."""
    if ops:
        return _decode_cid(ops[0])
    return _context.current_id() if eager else None  # XLA's thread: a private context


def _custom_vjp(call: Call, strategy: Mode, n_ops: int, made: _Made) -> Callable[..., Any]:
    """``call`` as a ``jax.custom_vjp`` of its differentiable leaves (then ``n_ops`` operands
    that are not differentiated: the context id), running on this host when its values are
    concrete and in a host callback (``host_call``) when they are traced (``jit``, ``vmap``)."""
    nd, method = len(call.diff), strategy.vmap_method

    def primal(*vals: Any) -> Any:
        vals = vals[:nd]
        if not _traced(vals):
            return _placed_like(arrays(strategy.evaluate(call, vals)), vals)
        specs, tree = _out_specs(call, strategy)

        def run(*v: Any) -> list[np.ndarray]:
            return call.flat_result(strategy.evaluate(call, v), specs, call.batch_of(v))

        return jax.tree_util.tree_unflatten(tree, host_call(run, specs, *vals, vmap_method=method))

    def forward(vals: Any, ops: Any, eager: bool) -> tuple[Any, int]:
        out, handle = strategy.forward(call, vals, _tape_context(ops, eager))
        made.add(handle)
        return out, handle

    def fwd(*vals: Any) -> tuple[Any, tuple[jax.Array, tuple]]:
        vals, ops = vals[:nd], vals[nd:]
        if not _traced(vals) and not _traced(ops):
            out, handle = forward(vals, ops, True)
            placed = tuple(v if _placement_of(v) is not None else None for v in vals)
            return _placed_like(arrays(out), vals), (jnp.asarray(handle, jnp.int32), placed)
        specs, tree = _out_specs(call, strategy)

        def run(*v: Any) -> list[np.ndarray]:
            v, o = v[:nd], v[nd:]
            out, handle = forward(v, o, False)
            batch = call.batch_of(v)
            flat = call.flat_result(out, specs, batch)
            lead = np.shape(flat[0])[:batch] if flat else ()
            return [*flat, np.full(lead, handle, np.int32)]

        res = host_call(run, [*specs, _HANDLE], *vals, *ops, vmap_method=method)
        return jax.tree_util.tree_unflatten(tree, res[:-1]), (res[-1], ())

    def bwd(residuals: tuple[jax.Array, tuple], ct: Any) -> tuple[Any, ...]:
        handle, placed = residuals
        cts = jax.tree_util.tree_leaves(ct)
        nones = (None,) * n_ops
        if not isinstance(handle, jax.core.Tracer) and not _traced(cts):
            grads = arrays(strategy.backward(call, int(handle), cts))
            return (*(_on_device_of(g, p) for g, p in zip(grads, placed, strict=True)), *nones)

        def run(h: Any, *c: Any) -> list[np.ndarray]:
            grads = strategy.backward(call, int(np.asarray(h).flat[0]), list(c))
            return [np.asarray(g) for g in grads]

        grads = host_call(run, call.in_specs, handle, *cts, vmap_method=method)
        return (*grads, *nones)

    f = jax.custom_vjp(primal)
    f.defvjp(fwd, bwd)
    return f
