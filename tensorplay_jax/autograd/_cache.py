"""Compiled-once forward and VJP functions, cached per operation, static arguments and avals.

Every recorded operation is a *flat function* ``f(*dynamic_values) -> pytree of
arrays``. For each cache key (the operation, its static arguments, and for the
VJP which positions are differentiated) the cache keeps two ``jax.jit``
functions: ``forward`` (no gradient needed) and ``forward_vjp`` (returns the
outputs and the ``jax.vjp`` pullback, a ``Partial`` holding only residuals).
``jax.jit`` then caches one executable per input shape/dtype. The backward is a
single jitted ``apply_vjp(pullback, cotangents, out_info)``: the pullback's tree
structure is the same object on every hit of a cached forward, so the backward
of an operation is also traced once per shape/dtype, never per call.

``trace_counts()`` reports how many times each operation was traced (tests use
it to prove that a second call does not retrace). All of it is one bounded object,
``CACHE`` (:class:`CompileCache`). A speed-up layer's execution backend
(``_seams.strategy``) may run a forward-with-VJP or a pullback instead of its
compiled program, and an unrecorded forward by the operation's NumPy rule
(:func:`register_numpy_rule`) where the operation has one.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import _seams
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.runtime.device import to_device

MAX_CACHED_OPERATIONS = 4096
MAX_ONES = 1024  # implicit root gradients kept (one per shape and dtype)
MAX_RULES = 4096  # call_rule pullbacks bound to a mask


class CompileCache:
    """The core tape's caches, one per process (``CACHE``); each is bounded.

    Attributes:
        entries: operation key -> ``_Entry`` (least recently made dropped first,
            ``MAX_CACHED_OPERATIONS``).
        trace_counts: operation name -> times traced (one counter per name).
        ones: (shape, dtype) -> a ones array, the implicit gradient of a root.
        rules: (pullback function, mask) -> the pullback bound to the mask.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[Hashable, _Entry] = collections.OrderedDict()
        self.trace_counts: collections.Counter[str] = collections.Counter()
        self.ones: dict[tuple[tuple[int, ...], Any], jax.Array] = {}
        self.rules: dict[tuple[Callable[..., Any], tuple[bool, ...]], Callable[..., Any]] = {}

    def clear(self) -> None:
        """Drop every cached operation, ones array and bound rule (frees compiled
        executables; the trace counts stay, so tests can compare before and after)."""
        with self.lock:
            self.entries.clear()
            self.ones.clear()
            self.rules.clear()


CACHE = CompileCache()

NUMPY_RULES: dict[Callable[..., Any], Callable[..., Any]] = {}
"""Operations' NumPy counterparts, by operation function: see :func:`register_numpy_rule`."""


def register_numpy_rule(fn: Callable[..., Any], rule: Callable[..., Any]) -> None:
    """Give the operation ``fn`` (``call_op``'s function) a NumPy counterpart.

    ``rule(*values, **static)`` returns what ``fn(*values, **static)`` returns, as a
    NumPy array of the same shape and the same (canonical) dtype, or
    ``NotImplemented`` for inputs it does not take; it never writes its inputs. The
    core never runs it: an execution backend may, for an unrecorded call (the
    speed-up layer's, on small CPU inputs, in place of the operation's traced
    jaxpr). An operation whose static arguments take many values (the bounds of
    a slice) is traced once per value; its rule is not. Registered beside the
    operation, before its first call.

    Example:
        >>> import numpy as np
        >>> def twice(x): return x * 2
        >>> register_numpy_rule(twice, lambda x: np.multiply(x, 2))
        >>> _Entry("twice", twice).numpy(np.ones(2, np.float32))
        array([2., 2.], dtype=float32)
        >>> del NUMPY_RULES[twice]
    """
    NUMPY_RULES[fn] = rule


def _numpy_rule_of(flat_fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The NumPy rule of ``flat_fn`` (``call_op``'s ``partial(fn, **static)``), bound to
    its static arguments; None without one."""
    fn, static = flat_fn, {}
    if isinstance(flat_fn, functools.partial) and not flat_fn.args:
        fn, static = flat_fn.func, flat_fn.keywords
    try:
        rule = NUMPY_RULES.get(fn)
    except TypeError:  # an unhashable callable: no rule
        return None
    if rule is None or not static:
        return rule
    return functools.partial(rule, **static)


def _bounded_put(table: dict[Any, Any], key: Any, value: Any, limit: int) -> Any:
    with CACHE.lock:
        value = table.setdefault(key, value)
        while len(table) > limit:
            del table[next(iter(table))]
    return value


def trace_counts() -> dict[str, int]:
    """How many times each operation name was traced (forward, vjp and backward together)."""
    return dict(CACHE.trace_counts)


def clear() -> None:
    """Drop every cached operation (tests; frees compiled executables)."""
    CACHE.clear()


class _Entry:
    """The jitted forward and per-differentiation-mask forward-with-VJP of one operation."""

    __slots__ = ("_vjps", "flat_fn", "forward", "name", "numpy", "plain")

    def __init__(self, name: str, flat_fn: Callable[..., Any]) -> None:
        self.name = name
        counts = CACHE.trace_counts

        def counted(*args: Any) -> Any:
            counts[name] += 1
            return flat_fn(*args)

        self.flat_fn = counted
        self.plain = flat_fn  # traced by an execution backend (not a compilation: not counted)
        self.numpy = _numpy_rule_of(flat_fn)  # its NumPy rule, or None
        self.forward = xla_options.jit(counted)
        self._vjps: dict[tuple[bool, ...], Callable[..., Any]] = {}

    def forward_vjp(self, mask: tuple[bool, ...]) -> Callable[..., Any]:
        """``jit(f(diff_values, other_values) -> (outputs, pullback))`` for this mask."""
        fn = self._vjps.get(mask)
        if fn is None:
            fn = xla_options.jit(functools.partial(_forward_vjp, self.flat_fn, mask))
            self._vjps[mask] = fn
        return fn


class Pullback(tuple):
    """A pullback of ``jax.vjp`` held flat: ``(tree structure, residual, residual, ...)``.

    ``jax.vjp``'s pullback is a pytree of several Python objects (a ``VJP``, its
    lists of residuals, marker objects). A node holds one pullback for as long as
    its graph lives, and a graph of many thousand nodes would hold all of those
    objects where the cyclic garbage collector walks them at each full
    collection; held flat, a pullback is one tuple. It is a pytree whose leaves
    are the residuals (the same leaves, in the same order, as the pullback it
    holds), so compiled backwards take it as they took that one; calling it
    rebuilds the pullback and calls it (inside a trace, where the backward runs).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> _, pb = jax.vjp(jnp.sin, jnp.ones(2))
        >>> flat = Pullback.of(pb)
        >>> len(jax.tree_util.tree_leaves(flat)) == len(jax.tree_util.tree_leaves(pb))
        True
        >>> bool((flat(jnp.ones(2))[0] == pb(jnp.ones(2))[0]).all())
        True
    """

    __slots__ = ()

    @classmethod
    def of(cls, pullback: Any) -> Pullback:
        """``pullback`` held flat."""
        leaves, treedef = jax.tree_util.tree_flatten(pullback)
        return cls((treedef, *leaves))

    def __call__(self, cotangents: Any) -> Any:
        return jax.tree_util.tree_unflatten(self[0], self[1:])(cotangents)


jax.tree_util.register_pytree_node(
    Pullback,
    lambda p: (p[1:], p[0]),
    lambda treedef, leaves: Pullback((treedef, *leaves)),
)


def _forward_vjp(
    flat_fn: Callable[..., Any],
    mask: tuple[bool, ...],
    diff: tuple[Any, ...],
    other: tuple[Any, ...],
) -> tuple[Any, Pullback]:
    def f(*d: Any) -> Any:
        di, oi = iter(d), iter(other)
        return flat_fn(*[next(di) if m else next(oi) for m in mask])

    out, pullback = jax.vjp(f, *diff)
    return out, Pullback.of(pullback)


def lookup(key: Hashable, name: str, make_flat_fn: Callable[[], Callable[..., Any]]) -> _Entry:
    """The cache entry for ``key``, building it with ``make_flat_fn()`` on a miss."""
    entries = CACHE.entries
    try:
        entry = entries[key]
    except KeyError:
        entry = _Entry(name, make_flat_fn())
        with CACHE.lock:
            entry = entries.setdefault(key, entry)
            while len(entries) > MAX_CACHED_OPERATIONS:
                entries.popitem(last=False)
    return entry


def rule_for(pullback: Callable[..., Any], mask: tuple[bool, ...]) -> Callable[..., Any]:
    """``pullback`` bound to ``mask``, one object per pair (the backward's jit cache key).

    Keyed by the function itself (the key keeps it alive, so the pair cannot be
    mistaken for another function's)."""
    key = (pullback, mask)
    fn = CACHE.rules.get(key)
    if fn is None:
        fn = _bounded_put(CACHE.rules, key, functools.partial(pullback, mask), MAX_RULES)
    return fn


OutInfo = tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]
LEAF = jax.tree_util.tree_structure(0)  # the tree structure of a single array


def out_info_of(leaves: list[Any], treedef: Any) -> OutInfo:
    """Static description of an operation's outputs: tree structure, (shape, dtype) per leaf."""
    return treedef, tuple((tuple(x.shape), x.dtype) for x in leaves)


def ones_like(value: Any) -> jax.Array:
    """``ones(value.shape, value.dtype)``, made once per shape and dtype (arrays are immutable)
    and filled on the host (``jnp.ones`` would compile a program per shape)."""
    key = (value.shape, value.dtype)
    ones = CACHE.ones.get(key)
    if ones is None:
        made = to_device(np.ones(value.shape, value.dtype))
        ones = _bounded_put(CACHE.ones, key, made, MAX_ONES)
    return ones


def zero_cotangent(shape: tuple[int, ...], dtype: Any) -> Any:
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.zeros(shape, dtype)
    return np.zeros(shape, jax.dtypes.float0)


def pullback_body(pullback: Any, cts: tuple[Any, ...], out_info: OutInfo) -> Any:
    """``pullback`` on the cotangents, a zero for each ``None`` (traced)."""
    treedef, avals = out_info
    full = [
        ct.astype(dtype) if ct is not None else zero_cotangent(shape, dtype)
        for ct, (shape, dtype) in zip(cts, avals, strict=True)
    ]
    return pullback(jax.tree_util.tree_unflatten(treedef, full))


@functools.partial(xla_options.jit, static_argnums=2)
def _apply_vjp(pullback: Any, cts: tuple[Any, ...], out_info: OutInfo) -> Any:
    CACHE.trace_counts["<backward>"] += 1
    return pullback_body(pullback, cts, out_info)


def apply_vjp(pullback: Any, cts: tuple[Any, ...], out_info: OutInfo) -> tuple[Any, ...]:
    """Run a cached pullback on output cotangents (``None`` = zero); one gradient per diff input.

    The installed execution backend (``_seams.strategy``) may run it; else it runs compiled.
    """
    cts = tuple(cts)
    strategy = _seams.strategy
    out = NotImplemented if strategy is None else strategy.run_pullback(pullback, cts, out_info)
    if out is NotImplemented:
        out = _apply_vjp(pullback, cts, out_info)
    return tuple(out)


def forward(entry: _Entry, values: Any) -> Any:
    """``entry``'s outputs on ``values`` (an unrecorded call): by the installed execution
    backend (``_seams.strategy``) if it takes them, else by the compiled forward."""
    strategy = _seams.strategy
    out = NotImplemented if strategy is None else strategy.run(entry, values)
    if out is NotImplemented:
        out = entry.forward(*values)
    return out


def forward_vjp(
    entry: _Entry, mask: tuple[bool, ...], diff: tuple[Any, ...], other: tuple[Any, ...]
) -> tuple[Any, Any]:
    """``entry``'s outputs and pullback: by the installed execution backend
    (``_seams.strategy``) if it takes them, else by the compiled forward-with-VJP."""
    strategy = _seams.strategy
    out = NotImplemented if strategy is None else strategy.run_vjp(entry, mask, diff, other)
    if out is NotImplemented:
        out = entry.forward_vjp(mask)(diff, other)
    return out
