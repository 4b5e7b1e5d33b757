"""Recording operations on the tape: ``apply``/``function`` for any JAX function, ``call_op``.

``call_op(fn, name, args, static)`` is the fast path the built-in operators use:
positional ``args`` are dynamic (Tensors, arrays, Python scalars: traced, so a
new scalar value does not retrace), ``static`` is a hashable tuple of keyword
arguments baked into the compiled function. ``apply(fn, *args, **kwargs)``
flattens pytrees: Tensor and array leaves are dynamic, every other leaf
(ints, floats, strings, None, callables) is static and part of the cache key.

Either way the operation becomes ONE node whose backward is the cached VJP of
the whole function (see ``_cache``). The installed recording strategy
(``_seams.strategy``; the speed-up layer's defers a recorded operation into its
thread's segment) is asked first; without one, or when it declines, the operation
runs here at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import numpy as np

from tensorplay_jax.autograd import _cache, _seams
from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._grad_mode import is_grad_enabled
from tensorplay_jax.autograd._node import VJPNode
from tensorplay_jax.autograd._op_errors import op_error

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

F = TypeVar("F", bound=Callable[..., Any])

_DYNAMIC_TYPES = (jax.Array, np.ndarray, np.generic)
# A Tensor that arrived over RPC holds a host NumPy array; operations pass a small one
# to jit as it is (cheaper than a device_put first) and place a larger one once.
HOST_VALUE_BYTES = 1 << 16
_PENDING = _seams.PENDING
_entries = _cache.CACHE.entries  # (cleared in place, never replaced)


def _operand_value(t: Tensor) -> Any:
    node = t._grad_fn
    if node is not None and node.lazy is not None:
        return _PENDING  # computed by its strategy, or by ``_concrete``
    v = t._value
    if type(v) is np.ndarray and v.nbytes > HOST_VALUE_BYTES:
        v = t.value  # a large host value: place it once, not on every use
    return v


def _is_tensor(x: Any) -> bool:
    return isinstance(x, _tc.Tensor)


def _operands(args: Sequence[Any]) -> tuple[list[Any], list[Tensor | None]]:
    """Each argument's value for the compiled function, and the Tensor behind it (or None)."""
    values: list[Any] = []
    tensors: list[Tensor | None] = []
    for a in args:
        if isinstance(a, _tc.Tensor):
            values.append(_operand_value(a))
            tensors.append(a)
        else:
            values.append(a)
            tensors.append(None)
    return values, tensors


def _concrete(values: Sequence[Any], tensors: Sequence[Tensor | None]) -> Sequence[Any]:
    """``values`` with each pending one computed (its segment runs)."""
    for v in values:
        if v is _PENDING:
            return [
                t._value if v is _PENDING else v  # type: ignore[union-attr]
                for v, t in zip(values, tensors, strict=True)
            ]
    return values


def _run(
    entry: _cache._Entry,
    values: Sequence[Any],
    tensors: Sequence[Tensor | None],
    saves: bool = True,
) -> Any:
    """Run a cached operation on dynamic ``values``; record a node if any Tensor needs grad.

    ``tensors[i]`` is the Tensor behind ``values[i]`` (``None`` for arrays/scalars).
    With ``saves`` the node remembers each input Tensor's ``_version``, so that a
    backward after one of them was written in place raises, as torch does.
    Returns the output pytree with every array leaf wrapped in a Tensor.
    """
    mask = tuple(t is not None and t._requires_grad for t in tensors)
    record = any(mask) and is_grad_enabled()
    if record and any(isinstance(v, jax.core.Tracer) for v in values):
        # Inside a JAX transformation (e.g. nn.functional_call under jax.grad): JAX owns
        # differentiation there, and a node holding tracers would outlive its trace.
        record = False
    strategy = _seams.strategy
    if strategy is not None:
        if record:
            out = strategy.record(entry, values, tensors, mask, saves)
            if out is not NotImplemented:
                return out
        elif any(v is _PENDING for v in values):  # held back with the work it reads
            out = strategy.defer(entry, values, tensors)
            if out is not NotImplemented:
                return out
    values = _concrete(values, tensors)
    if not record:
        out = _cache.forward(entry, values)
        if isinstance(out, jax.Array):  # one output (most operations): no pytree work
            return _tc.Tensor._wrap(out)
        return jax.tree_util.tree_map(_tc.Tensor._wrap, out)
    diff = tuple(v for v, m in zip(values, mask, strict=True) if m)
    other = tuple(v for v, m in zip(values, mask, strict=True) if not m)
    out, pullback = _cache.forward_vjp(entry, mask, diff, other)
    edges = [t._gradient_edge() for t, m in zip(tensors, mask, strict=True) if m]  # type: ignore[union-attr]
    saved = tuple(t for t in tensors if t is not None) if saves else ()
    if isinstance(out, jax.Array):  # one output (most operations): no pytree work
        info = (_cache.LEAF, ((out.shape, out.dtype),))
        node = VJPNode(entry.name, pullback, info, edges, 1, saved)
        if saves:
            node.recipe = (entry, mask, None, values)
        return _tc.Tensor._wrap_output(out, node, 0)
    leaves, treedef = jax.tree_util.tree_flatten(out)
    node = VJPNode(
        entry.name,
        pullback,
        _cache.out_info_of(leaves, treedef),
        edges,
        len(leaves),
        saved,
    )
    if saves:
        node.recipe = (entry, mask, None, values)
    wrapped = [_tc.Tensor._wrap_output(leaf, node, i) for i, leaf in enumerate(leaves)]
    return jax.tree_util.tree_unflatten(treedef, wrapped)


def call_op(
    fn: Callable[..., Any],
    name: str,
    args: Sequence[Any],
    static: tuple[tuple[str, Hashable], ...] = (),
    *,
    saves: bool = True,
) -> Any:
    """Run the built-in operation ``fn(*args, **dict(static))`` as one node (see module doc).

    ``saves=False`` for operations whose backward needs no input value (``add``,
    reshapes, indexing ...): writing their inputs in place later is no error.
    """
    # id(fn): some functions hash slowly (jnp ufuncs); the entry holds fn, so the
    # id cannot be reused while the entry exists.
    key = (id(fn), static)
    entry = _entries.get(key)  # a hit costs no closure and no call
    if entry is None:
        entry = _cache.lookup(key, name, lambda: functools.partial(fn, **dict(static)))
    try:
        strategy = _seams.strategy
        if strategy is not None:  # e.g. the operation a recurring step records here
            out = strategy.replay(entry, args, saves)
            if out is not NotImplemented:
                return out
        values, tensors = _operands(args)
        return _run(entry, values, tensors, saves)
    except (TypeError, ValueError) as e:  # operands that do not fit: see _op_errors
        raise op_error(e)  # noqa: B904  (op_error sets __cause__ when it turns e)


def call_rule(
    fn: Callable[..., Any],
    pullback: Callable[..., Any],
    name: str,
    args: Sequence[Any],
) -> Any:
    """Run ``fn(*args)`` (one array out) as one node whose backward is a hand-written rule.

    ``call_op`` differentiates ``fn`` with ``jax.vjp`` inside the compiled forward,
    whose residuals are new buffers: for ``x @ w.T`` a transposed copy of ``w``
    and a copy of ``x``. Here the forward computes the output only, and the
    node keeps the operand arrays themselves: the backward runs
    ``pullback(mask, *operands, cotangent)`` compiled, where ``mask[i]`` says
    whether operand ``i`` needs a gradient; it returns one gradient per
    ``True``, in order, each in its operand's dtype.

    Args:
        fn: a pure JAX function of ``args``' values returning one array.
        pullback: ``pullback(mask, *values, ct)``, a module-level function (it
            is part of the backward's compile cache key).
        name: the node's name (``grad_fn.name``).
        args: the operands: Tensors, arrays or ``None``.

    Returns:
        ``fn``'s output as a Tensor, on the tape when an operand requires grad.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd import call_rule
        >>> def scale(x, w):
        ...     return x * w
        >>> def scale_pullback(mask, x, w, ct):
        ...     return tuple(g for g, m in zip((ct * w, (ct * x).sum()), mask) if m)
        >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
        >>> y = call_rule(scale, scale_pullback, "scaleBackward", (x, tp.tensor(3.0)))
        >>> y.sum().backward()
        >>> x.grad
        tensor([3., 3.])
    """
    try:
        return _call_rule(fn, pullback, name, args)
    except (TypeError, ValueError) as e:  # operands that do not fit: see _op_errors
        raise op_error(e)  # noqa: B904  (op_error sets __cause__ when it turns e)


def _call_rule(
    fn: Callable[..., Any], pullback: Callable[..., Any], name: str, args: Sequence[Any]
) -> Any:
    key = (id(fn), ())
    entry = _cache.lookup(key, name, lambda: fn)
    values, tensors = _operands(args)
    mask = tuple(t is not None and t._requires_grad for t in tensors)
    record = any(mask) and is_grad_enabled()
    strategy = _seams.strategy
    if record and strategy is not None and not any(isinstance(v, jax.core.Tracer) for v in values):
        out = strategy.record(entry, values, tensors, mask, True, _cache.rule_for(pullback, mask))
        if out is not NotImplemented:
            return out
    values = _concrete(values, tensors)
    out = _cache.forward(entry, values)
    if not record or any(isinstance(v, jax.core.Tracer) for v in values):
        return _tc.Tensor._wrap(out)
    rule = _cache.rule_for(pullback, mask)
    vjp = jax.tree_util.Partial(rule, *values)
    edges = [t._gradient_edge() for t, m in zip(tensors, mask, strict=True) if m]  # type: ignore[union-attr]
    saved = tuple(t for t in tensors if t is not None)
    info = (_cache.LEAF, ((out.shape, out.dtype),))
    node = VJPNode(entry.name, vjp, info, edges, 1, saved)
    node.recipe = (entry, mask, rule, values)
    return _tc.Tensor._wrap_output(out, node, 0)


def _static_leaf(leaf: Any, where: str) -> Hashable:
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"tp.apply: argument leaf {leaf!r} at {where} is neither a Tensor/array nor "
            "hashable; non-array arguments are static (part of the compile cache key), so "
            "they must be hashable: pass a tuple instead of a list, or convert it to an array"
        ) from None
    return (type(leaf), leaf)


def apply(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a pure JAX function on Tensors as ONE recorded node.

    Pytrees of Tensors (and arrays) go in; ``fn`` sees ``jax.Array`` leaves in
    their place and returns a pytree of arrays, which comes back with every leaf
    wrapped in a Tensor. Gradients flow to every grad-requiring input Tensor
    through ``jax.vjp(fn)``, compiled once per shape/dtype and reused.

    Tensor and array leaves are traced; every other leaf (ints, floats,
    strings, ``None``) is static: it is part of the compile cache key and must
    be hashable. ``fn`` itself is part of the key too: pass the same function
    object each call (a lambda made anew each call recompiles each call).

    Args:
        fn: a pure function of JAX arrays (it may use any ``jax``/``jnp`` code).
        *args: positional arguments, pytrees of Tensors, arrays and static values.
        **kwargs: keyword arguments, treated like ``args``.

    Returns:
        ``fn``'s output pytree with Tensors for its array leaves; float outputs
        require grad when any input does (and grad mode is on).

    Raises:
        TypeError: a non-array leaf is unhashable.

    Example:
        >>> import jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
        >>> y = tp.apply(lambda a: jnp.sum(a**2), x)
        >>> y.backward()
        >>> x.grad
        tensor([2., 4.])
    """
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_tensor)
    kinds: list[Hashable] = []
    values: list[Any] = []
    tensors: list[Tensor | None] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, _tc.Tensor):
            kinds.append(None)
            values.append(_operand_value(leaf))
            tensors.append(leaf)
        elif isinstance(leaf, _DYNAMIC_TYPES):
            kinds.append(None)
            values.append(leaf)
            tensors.append(None)
        else:
            kinds.append(_static_leaf(leaf, f"leaf {i}"))
    try:
        key = ("apply", fn, treedef, tuple(kinds))
        hash(key)
    except TypeError:
        raise TypeError(f"tp.apply: fn={fn!r} is not hashable; pass a function") from None

    def make_flat_fn() -> Callable[..., Any]:
        static = list(leaves)
        dynamic_at = [i for i, k in enumerate(kinds) if k is None]
        for i in dynamic_at:
            static[i] = None

        def flat_fn(*dyn: Any) -> Any:
            full = list(static)
            for i, v in zip(dynamic_at, dyn, strict=True):
                full[i] = v
            a, kw = jax.tree_util.tree_unflatten(treedef, full)
            return fn(*a, **kw)

        return flat_fn

    name = getattr(fn, "__name__", type(fn).__name__)
    entry = _cache.lookup(key, f"{name}Backward", make_flat_fn)
    return _run(entry, values, tensors)


def function(fn: F) -> F:
    """Decorator: every call of ``fn`` runs through ``tp.apply`` as one recorded node.

    Args:
        fn: a pure JAX function (see ``apply`` for what is traced and what is static).

    Returns:
        A function taking Tensors (pytrees of them) and returning Tensors.

    Example:
        >>> import jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> @tp.function
        ... def mlp(x, w):
        ...     return jnp.tanh(x @ w).sum()
        >>> w = tp.ones((2, 3), requires_grad=True)
        >>> mlp(tp.ones((4, 2)), w).backward()
        >>> w.grad.shape
        (2, 3)
    """

    @functools.wraps(fn)
    def lifted(*args: Any, **kwargs: Any) -> Any:
        return apply(fn, *args, **kwargs)

    lifted.__wrapped__ = fn  # type: ignore[attr-defined]
    return lifted  # type: ignore[return-value]


def as_value(x: Any) -> Any:
    """The array behind a Tensor (other values unchanged): for code that must see raw arrays."""
    return x._value if isinstance(x, _tc.Tensor) else x
