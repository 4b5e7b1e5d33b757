"""The callee's half of ``differentiable_rpc``: the remote function's VJP, compiled and kept.

``mode="jax"``: the forward message runs :func:`forward` here, which takes
``jax.vjp`` of the remote function over its differentiable array arguments
(one jitted program, made once per function, static arguments and argument
shapes, and cached: :class:`_VjpProgram`, which outputs only the residuals
that are neither an input nor the result), returns the result and keeps the
pullback under a handle; the backward message runs :func:`backward`, which
applies the pullback to the cotangents (one jitted program too) and returns
the gradients. Arrays go back as NumPy views of the results, so that they
arrive as NumPy: the caller's host callback copies them into XLA's buffers.
Under ``jax.vmap`` the arguments carry ``batch`` leading dimensions (size 1
where an argument is not batched): they are broadcast and the function is
``jax.vmap``-ped here, so one message carries the whole batch.

``mode="tape"``: :func:`tape_call` runs the function on the Tensors the call
carries (recorded by distributed autograd as any RPC) and turns JAX's
``Tensor`` TypeError into one that names ``mode="jax"``.

A pullback whose backward never runs (a ``jax.vjp`` never applied, the first
forward of a ``jax.checkpoint``-ed call) is dropped once more than
``MAX_PENDING`` are kept.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from tensorplay_jax.rpc import get_worker_info
from tensorplay_jax.rpc.internal import internal_target
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.runtime.shards import is_sharded
from tensorplay_jax.tensors import Tensor

__all__ = ["MAX_PENDING", "backward", "drop", "forward", "stats", "tape_call"]

MAX_PENDING = 4096  # kept pullbacks per worker; the oldest goes first
_CACHE_SIZE = 256  # compiled (function, static arguments) pairs per worker

_pending: collections.OrderedDict[int, tuple[Any, ...]] = collections.OrderedDict()
_lock = threading.Lock()
_handles = itertools.count(1)
_forwards = [0]
_compiled: collections.OrderedDict[Any, Callable[..., Any]] = collections.OrderedDict()


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def _mode_hint(func: Any, e: BaseException, mode: str) -> TypeError:
    if mode == "jax":
        what = "tape code (Tensor ops, RRef-held parameters)"
        fix = "pass mode='tape' to differentiable_rpc"
    else:
        what = "a plain JAX function (jax.numpy on arrays), which cannot take Tensors"
        fix = "pass mode='jax' to differentiable_rpc (the default)"
    return TypeError(
        f"differentiable_rpc(mode={mode!r}): {_name(func)} looks like {what}: {e}; {fix}"
    )


def _vmapped(fn: Callable[..., Any], k: int) -> Callable[..., Any]:
    for _ in range(k):
        fn = jax.vmap(fn)
    return fn


def _traceable(func: Any, leaves: list[Any], tree: Any, diff: list[int]) -> Callable[..., Any]:
    """``func`` as a function of its differentiable leaves, the other leaves fixed."""

    def g(*vals: Any) -> Any:
        full = list(leaves)
        for i, v in zip(diff, vals, strict=True):
            full[i] = v
        a, k = jax.tree_util.tree_unflatten(tree, full)
        out = func(*a, **k)
        if any(isinstance(t, Tensor) for t in jax.tree_util.tree_leaves(out)):
            raise TypeError("it returned a tensorplay Tensor")
        return out

    return g


def _program(
    func: Any, leaves: list[Any], tree: Any, diff: list[int], batch: int, vjp: bool, vals: list
) -> Callable[..., Any]:
    """The jitted forward (a :class:`_VjpProgram` when ``vjp``) of ``func`` at the flattened
    ``(args, kwargs)``, one per function, static leaves and argument shapes, cached when
    the static leaves hash."""
    static = tuple((i, type(x), x) for i, x in enumerate(leaves) if i not in diff)
    shapes = tuple((v.shape, v.dtype) for v in vals)
    try:
        key: Any = (func, tree, static, tuple(diff), batch, vjp, shapes)
        hash(key)
    except TypeError:
        key = None
    if key is not None:
        with _lock:
            if key in _compiled:
                _compiled.move_to_end(key)
                return _compiled[key]
    g = _traceable(func, leaves, tree, diff)
    prog = _VjpProgram(g, batch) if vjp else xla_options.jit(_vmapped(g, batch))
    if key is not None:
        with _lock:
            _compiled[key] = prog
            while len(_compiled) > _CACHE_SIZE:
                _compiled.popitem(last=False)
    return prog


class _VjpProgram:
    """``jax.vjp`` of ``g`` as one jitted program whose outputs are only what is new.

    The pullback's residuals that are an input or a result leaf are not output
    again (XLA would copy them into fresh buffers): the program returns the
    result and the other residuals, and the call rebuilds the pullback from
    those, the result and the very input arrays it was given. Which residual
    comes from where is found while tracing, so one instance serves one
    argument signature (``_program`` keys it by shapes).
    """

    def __init__(self, g: Callable[..., Any], batch: int) -> None:
        self._g = g
        self._where: list[tuple[int, int]] = []  # per residual: (0 input | 1 result | 2 new, i)
        self._tree: Any = None
        self._jit = xla_options.jit(_vmapped(self._body, batch))

    def _body(self, *v: Any) -> tuple[Any, list[Any]]:
        out, pullback = jax.vjp(self._g, *v)
        residuals, self._tree = jax.tree_util.tree_flatten(pullback)
        known, new = (v, jax.tree_util.tree_leaves(out)), []
        where = []
        for r in residuals:
            at = next(((k, i) for k in (0, 1) for i, x in enumerate(known[k]) if x is r), None)
            if at is None:
                at = next(((2, i) for i, x in enumerate(new) if x is r), (2, len(new)))
                if at[1] == len(new):
                    new.append(r)
            where.append(at)
        self._where = where
        return out, new

    def __call__(self, *vals: Any) -> tuple[Any, Any]:
        """``(result, pullback)`` of the function at ``vals`` (the pullback keeps them)."""
        out, new = self._jit(*vals)
        src = (vals, jax.tree_util.tree_leaves(out), new)
        return out, self._tree.unflatten([src[k][i] for k, i in self._where])


def _broadcast(vals: list[Any], batch: int) -> tuple[list[Any], tuple[int, ...]]:
    """Broadcast the leading ``batch`` dimensions of ``vals`` to their common shape."""
    if not batch:
        return vals, ()
    shape = np.broadcast_shapes(*[np.shape(v)[:batch] for v in vals])
    return [np.broadcast_to(v, shape + np.shape(v)[batch:]) for v in vals], tuple(shape)


@internal_target
def forward(
    func: Any, args: Any, kwargs: Any, diff: list[int], batch: int, vjp: bool
) -> tuple[Any, int]:
    """Run ``func`` with its VJP (``vjp``) or without; return ``(result, handle)``.

    Example:
        >>> import jax.numpy as jnp
        >>> out, handle = forward(jnp.multiply, (jnp.ones(2), 3.0), {}, [0], 0, False)
        >>> out, handle
        (array([3., 3.], dtype=float32), 0)
    """
    with _lock:
        _forwards[0] += 1
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    vals, shape = _broadcast([leaves[i] for i in diff], batch)
    prog = _program(func, leaves, tree, diff, batch, vjp, vals)
    try:
        res = prog(*vals)
    except TypeError as e:
        if "Tensor" not in str(e):
            raise
        raise _mode_hint(func, e, "jax") from e
    if not vjp:
        return _host(res), 0
    out, pullback = res
    flat, tree = jax.tree_util.tree_flatten(out)
    handle = next(_handles) & 0x7FFFFFFF
    with _lock:
        _pending[handle] = (pullback, shape, [(o.shape, o.dtype) for o in flat], tree)
        while len(_pending) > MAX_PENDING:
            _pending.popitem(last=False)
    return tree.unflatten([_on_wire(o) for o in flat]), handle


@internal_target
def backward(handle: int, cts: list[Any]) -> tuple[Any, ...]:
    """Apply the pullback kept under ``handle`` to the cotangents ``cts`` (once).

    Example:
        >>> import jax.numpy as jnp
        >>> out, h = forward(jnp.multiply, (jnp.ones(2), 3.0), {}, [0], 0, True)
        >>> backward(h, [jnp.ones(2)])
        (array([3., 3.], dtype=float32),)
    """
    with _lock:
        rec = _pending.pop(handle, None)
    if rec is None:
        raise RuntimeError(
            f"differentiable_rpc: no pending forward {handle} on {get_worker_info().name}: its "
            f"backward already ran, or more than {MAX_PENDING} forwards waited for theirs"
        )
    pullback, shape, outs, tree = rec
    full = [
        c
        if np.shape(c) == o and getattr(c, "dtype", None) == dt
        else np.broadcast_to(np.asarray(c, dt), o)
        for c, (o, dt) in zip(cts, outs, strict=True)
    ]
    return tuple(_on_wire(g) for g in _applier(len(shape))(pullback, tree.unflatten(full)))


def _on_wire(a: Any) -> Any:
    """An array of the reply: a NumPy view, which travels as NumPy and arrives as NumPy
    (the caller's host callback copies it into XLA's buffers; a single-device JAX array
    would be put on the caller's device first), or a sharded array as it is: it travels
    shard by shard and arrives sharded over the caller's devices (the device maps)."""
    return a if isinstance(a, jax.Array) and is_sharded(a) else np.asarray(a)


def _host(out: Any) -> Any:
    """``out`` with its arrays as :func:`_on_wire` sends them."""
    return jax.tree_util.tree_map(_on_wire, out)


def _applier(batch: int) -> Callable[..., Any]:
    """``pullback(cotangents)``, jitted, ``jax.vmap``-ped over ``batch`` leading dimensions."""
    with _lock:
        if batch not in _appliers:
            _appliers[batch] = xla_options.jit(_vmapped(lambda pullback, cts: pullback(cts), batch))
        return _appliers[batch]


_appliers: dict[int, Callable[..., Any]] = {}


@internal_target
def drop(handle: int) -> None:
    """Forget the pullback kept under ``handle`` (its backward will not run).

    Example:
        >>> import jax.numpy as jnp
        >>> out, h = forward(jnp.multiply, (jnp.ones(2), 3.0), {}, [0], 0, True)
        >>> drop(h)
        >>> drop(h)  # already gone: nothing to do
    """
    with _lock:
        _pending.pop(handle, None)


def stats() -> dict[str, int]:
    """This worker's counts: forward messages served, pullbacks kept, programs compiled.

    Example:
        >>> sorted(stats())
        ['compiled', 'forwards', 'pending']
    """
    with _lock:
        return {"forwards": _forwards[0], "pending": len(_pending), "compiled": len(_compiled)}


def tape_call(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` on Tensors; JAX's ``Tensor`` TypeError names ``mode="jax"``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tape_call(tp.mul, tp.ones(2), 3.0)
        tensor([3., 3.])
    """
    try:
        return func(*args, **kwargs)
    except TypeError as e:
        if "Tensor" not in str(e) or "abstract array" not in str(e):
            raise
        raise _mode_hint(func, e, "tape") from e
