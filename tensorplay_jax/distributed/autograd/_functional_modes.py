"""The two modes of ``differentiable_rpc``: how one call runs, keeps its backward and runs it.

A mode is a strategy object behind ``_functional``'s one ``jax.custom_vjp``
factory. Each has the same methods, on a :class:`Call` (the destination, the
function and its arguments split into differentiable leaves and the rest):

* ``check``: its rules for the arguments, before anything is traced;
* ``evaluate``: the result only (no derivative wanted);
* ``forward``: the result and an int handle of what the backward needs;
* ``backward``: cotangents of the result -> gradients of the differentiable leaves;
* ``drop``: a handle whose backward will never run (the call failed);
* ``result_shapes``: the result's shapes for staging (``jax.jit``, ``jax.vmap``),
  or :class:`NoShapes` saying why they are unknown here;
* ``run_here``: the call in one process (``testing.in_process_rpc``), where JAX
  differentiates the function itself;
* ``vmap_method``: how a staged call batches under ``jax.vmap``.

:class:`JaxMode`: ``func`` is a plain JAX function; the callee keeps its VJP
(``_remote_vjp``) and one message carries a whole ``vmap`` batch.
:class:`TapeMode`: ``func`` is tensorplay code; the arguments become leaf
Tensors that require grad, the call runs in a distributed autograd context and
the backward is a distributed backward pass from the call's outputs.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed.autograd import _context, _engine, _remote_vjp
from tensorplay_jax.rpc import rpc_sync
from tensorplay_jax.runtime.device import on_device
from tensorplay_jax.tensors import Tensor

__all__ = ["MODES", "Call", "JaxMode", "Mode", "NoShapes", "TapeMode", "arrays"]


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)


def arrays(out: Any) -> Any:
    """``out`` with every Tensor replaced by its array and every other leaf made a JAX array.

    Example:
        >>> arrays({"a": Tensor(jnp.ones(2)), "b": 1.0})["b"]
        Array(1., dtype=float32, weak_type=True)
    """
    return jax.tree_util.tree_map(
        lambda t: t.value if isinstance(t, Tensor) else jnp.asarray(t), out, is_leaf=_is_tensor
    )


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def _as_array(v: Any) -> Any:
    return np.asarray(v) if isinstance(v, np.ndarray) else jnp.asarray(v)


class NoShapes(Exception):
    """The result's shapes cannot be evaluated here; the message says why."""


class Call:
    """One ``differentiable_rpc`` call: where it goes, what runs there, and its arguments.

    ``leaves`` and ``tree`` are the flattened ``(args, kwargs)``; ``diff`` the
    indices of the differentiable leaves, whose values the custom_vjp passes
    around (``vals``) and :meth:`arguments` puts back in place.

    Example:
        >>> c = Call("w1", max, 60.0, ((jnp.ones(2), 3), {}), lambda x: isinstance(x, jax.Array))
        >>> c.diff, c.in_specs[0].shape, c.arguments([jnp.zeros(2)], lambda v: v)[0][1]
        ([0], (2,), 3)
    """

    def __init__(
        self,
        to: Any,
        func: Any,
        timeout: float,
        args_kwargs: tuple[tuple, dict[str, Any]],
        is_diff: Callable[[Any], bool],
        out_shape: Any = None,
    ) -> None:
        self.to, self.func, self.timeout, self.out_shape = to, func, timeout, out_shape
        self.leaves, self.tree = jax.tree_util.tree_flatten(args_kwargs, is_leaf=_is_tensor)
        self.diff = [i for i, x in enumerate(self.leaves) if is_diff(x)]
        self.in_specs = [
            jax.ShapeDtypeStruct(np.shape(self.leaves[i]), self.leaves[i].dtype) for i in self.diff
        ]
        self.name = _name(func)

    def arguments(self, vals: Any, wrap: Callable[[Any], Any]) -> tuple[tuple, dict[str, Any]]:
        """``(args, kwargs)`` with the differentiable leaves replaced by ``wrap(v)`` of ``vals``."""
        full = list(self.leaves)
        for i, v in zip(self.diff, vals, strict=True):
            full[i] = wrap(v)
        return jax.tree_util.tree_unflatten(self.tree, full)

    def batch_of(self, vals: Any) -> int:
        """How many leading ``vmap`` dimensions ``vals`` carry beyond the arguments' own."""
        return np.ndim(vals[0]) - len(self.in_specs[0].shape) if vals else 0

    def rpc(self, target: Callable[..., Any], args: tuple, kwargs: dict | None = None) -> Any:
        """``rpc_sync`` of ``target`` on the call's destination, with its timeout."""
        return rpc_sync(self.to, target, args=args, kwargs=kwargs, timeout=self.timeout)

    def flat_result(
        self, out: Any, specs: list[jax.ShapeDtypeStruct], batch: int
    ) -> list[np.ndarray]:
        """``out``'s leaves as NumPy arrays, checked against ``specs`` (past ``batch`` dims)."""
        flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
        got = [(tuple(x.shape)[batch:], x.dtype) for x in flat]
        want = [(tuple(sp.shape), np.dtype(sp.dtype)) for sp in specs]
        if got != want:
            raise ValueError(
                f"differentiable_rpc: {self.name} returned {got} (shape, dtype), "
                f"but out_shape declares {want}"
            )
        return flat


class Mode(Protocol):
    """What ``_functional``'s ``custom_vjp`` factory asks of a mode (see the module docstring)."""

    name: str
    vmap_method: str

    def check(self, call: Call, context_id: Any) -> None: ...

    def evaluate(self, call: Call, vals: Any) -> Any: ...

    def forward(self, call: Call, vals: Any, context_id: int | None) -> tuple[Any, int]: ...

    def backward(self, call: Call, handle: int, cts: list[Any]) -> tuple[Any, ...]: ...

    def drop(self, call: Call, handle: int) -> None: ...

    def result_shapes(self, call: Call) -> tuple[list[jax.ShapeDtypeStruct], Any]: ...

    def run_here(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any: ...


class JaxMode:
    """``func`` is a JAX function of arrays; its VJP is taken and kept on the callee."""

    name = "jax"
    vmap_method = "expand_dims"  # the callee vmaps func over the batch: one call

    def check(self, call: Call, context_id: Any) -> None:
        if any(_is_tensor(x) for x in call.leaves):
            raise TypeError(
                f"differentiable_rpc(mode='jax'): the arguments of {call.name} hold a "
                "tensorplay Tensor, but mode='jax' calls a JAX function on arrays; pass "
                "arrays (t.value), or mode='tape' for tensorplay code"
            )
        if context_id is not None:
            raise ValueError(
                "differentiable_rpc: context_id= is for mode='tape' (tape code reading "
                "RRef-held parameters); in mode='jax' pass parameters as arguments and "
                "take their gradients from jax.grad"
            )

    def _forward(self, call: Call, vals: Any, keep: bool) -> tuple[Any, int]:
        a, k = call.arguments(vals, _as_array)
        args = (call.func, a, k, call.diff, call.batch_of(vals), keep)
        return call.rpc(_remote_vjp.forward, args)

    def evaluate(self, call: Call, vals: Any) -> Any:
        return self._forward(call, vals, False)[0]

    def forward(self, call: Call, vals: Any, context_id: int | None) -> tuple[Any, int]:
        return self._forward(call, vals, True)  # NumPy arrays, as they came

    def backward(self, call: Call, handle: int, cts: list[Any]) -> tuple[Any, ...]:
        return tuple(call.rpc(_remote_vjp.backward, (handle, cts)))

    def drop(self, call: Call, handle: int) -> None:
        call.rpc(_remote_vjp.drop, (handle,))

    def result_shapes(self, call: Call) -> tuple[list[jax.ShapeDtypeStruct], Any]:
        def shaped(*vals: Any) -> Any:
            a, k = call.arguments(vals, _as_array)
            return call.func(*a, **k)

        try:
            return jax.tree_util.tree_flatten(jax.eval_shape(shaped, *call.in_specs))
        except Exception as e:  # any failure: the caller cannot evaluate it
            raise NoShapes(
                f"jax.eval_shape of {call.name} failed here: {type(e).__name__}: {e}"
            ) from e

    def run_here(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        return func(*args, **kwargs)


class TapeMode:
    """``func`` is tensorplay code, run on leaf Tensors in a distributed autograd context."""

    name = "tape"
    vmap_method = "sequential"  # tape code is written per example: one call per element

    def __init__(self) -> None:
        # handle -> (context, private?, the argument Tensors, the result's leaves)
        self._records: dict[int, tuple[Any, bool, list[Tensor], list[Any]]] = {}
        self._lock = threading.Lock()
        self._handles = itertools.count(1)

    def check(self, call: Call, context_id: Any) -> None:
        pass

    def evaluate(self, call: Call, vals: Any) -> Any:
        a, k = call.arguments(vals, lambda v: Tensor(jnp.asarray(v), requires_grad=False))
        return arrays(call.rpc(_remote_vjp.tape_call, (call.func, *a), k))

    def forward(self, call: Call, vals: Any, context_id: int | None) -> tuple[Any, int]:
        private = context_id is None
        if context_id is None:
            context_id = _context.new_context_id()
        ctx = _context.lookup(context_id, create=True)
        wrappers: list[Tensor] = []

        def leaf(v: Any) -> Tensor:
            wrappers.append(Tensor(jnp.asarray(v), requires_grad=True))
            return wrappers[-1]

        a, k = call.arguments(vals, leaf)
        try:
            with _context.using(context_id):
                out = call.rpc(_remote_vjp.tape_call, (call.func, *a), k)
        except BaseException:
            # No backward will run: a private context goes now, on every worker it reached.
            if private:
                _context.release(context_id, skip=None)
            raise
        handle = next(self._handles) & 0x7FFFFFFF
        outs = jax.tree_util.tree_leaves(out, is_leaf=_is_tensor)
        with self._lock:
            self._records[handle] = (ctx, private, wrappers, outs)
        return arrays(out), handle

    def backward(self, call: Call, handle: int, cts: list[Any]) -> tuple[Any, ...]:
        with self._lock:
            ctx, private, wrappers, outs = self._records.pop(handle)
        roots, grads = [], []
        for t, g in zip(outs, cts, strict=True):
            if isinstance(t, Tensor) and t.requires_grad:
                roots.append(t)
                grads.append(jnp.asarray(g, t.dtype))
        mine = {w: None for w in wrappers}
        got: dict[Tensor, jax.Array] = {}

        def accumulate(leaf: Tensor, g: jax.Array) -> None:
            if leaf in mine:  # an argument of this call: its gradient goes back to JAX
                got[leaf] = g if leaf not in got else got[leaf] + g
            else:  # a leaf elsewhere (an RRef-held parameter): into the context
                ctx.accumulate(leaf, g)

        try:
            if roots:
                _engine.run_pass(ctx, roots, grads, retain_graph=False, accumulate=accumulate)
        finally:
            if private:
                _context.release(ctx.context_id, skip=None)
        return tuple(on_device(got[w]) if w in got else jnp.zeros_like(w.value) for w in wrappers)

    def drop(self, call: Call, handle: int) -> None:
        with self._lock:
            ctx, private, _, _ = self._records.pop(handle)
        if private:
            _context.release(ctx.context_id, skip=None)

    def result_shapes(self, call: Call) -> tuple[list[jax.ShapeDtypeStruct], Any]:
        raise NoShapes("mode='tape' runs tensorplay code, whose shapes are not evaluated here")

    def run_here(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        # The callee sees Tensors that require grad and returns Tensors; the caller, arrays.
        args, kwargs = jax.tree_util.tree_map(_as_leaf_tensor, (args, kwargs))
        return jax.tree_util.tree_map(
            lambda v: v.value if isinstance(v, Tensor) else v, func(*args, **kwargs),
            is_leaf=_is_tensor,
        )  # fmt: skip


def _as_leaf_tensor(x: Any) -> Any:
    floating = isinstance(x, jax.Array | jax.core.Tracer) and jnp.issubdtype(x.dtype, jnp.inexact)
    return Tensor(x, requires_grad=True) if floating else x


MODES: dict[str, Mode] = {"jax": JaxMode(), "tape": TapeMode()}
