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
it to prove that a second call does not retrace).
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

from tensorplay_jax.autograd import _host_eval
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.runtime.device import to_device

MAX_CACHED_OPERATIONS = 4096

_lock = threading.Lock()
_entries: collections.OrderedDict[Hashable, _Entry] = collections.OrderedDict()
_trace_counts: collections.Counter[str] = collections.Counter()


def trace_counts() -> dict[str, int]:
    """How many times each operation name was traced (forward, vjp and backward together)."""
    return dict(_trace_counts)


def clear() -> None:
    """Drop every cached operation (tests; frees compiled executables)."""
    with _lock:
        _entries.clear()


class _Entry:
    """The jitted forward and per-differentiation-mask forward-with-VJP of one operation."""

    __slots__ = ("_vjps", "avals", "flat_fn", "forward", "host", "name", "plain", "seen")

    def __init__(self, name: str, flat_fn: Callable[..., Any]) -> None:
        self.name = name

        def counted(*args: Any) -> Any:
            _trace_counts[name] += 1
            return flat_fn(*args)

        self.flat_fn = counted
        self.plain = flat_fn  # traced by ``_host_eval`` (not a compilation: not counted)
        self.forward = xla_options.jit(counted)
        self._vjps: dict[tuple[bool, ...], Callable[..., Any]] = {}
        # (mask, input avals) -> (output tree, output structs), or None: not deferrable
        self.avals: dict[Hashable, Any] = {}
        # (mask, input avals) of the runs in a segment so far (``_lazy``: first sights)
        self.seen: set[Hashable] = set()
        # input avals -> NumPy program of an unrecorded run, or None (``_host_eval``)
        self.host: dict[Hashable, Any] = {}

    def forward_vjp(self, mask: tuple[bool, ...]) -> Callable[..., Any]:
        """``jit(f(diff_values, other_values) -> (outputs, pullback))`` for this mask."""
        fn = self._vjps.get(mask)
        if fn is None:
            fn = xla_options.jit(functools.partial(_forward_vjp, self.flat_fn, mask))
            self._vjps[mask] = fn
        return fn


def _forward_vjp(
    flat_fn: Callable[..., Any],
    mask: tuple[bool, ...],
    diff: tuple[Any, ...],
    other: tuple[Any, ...],
) -> tuple[Any, Any]:
    def f(*d: Any) -> Any:
        di, oi = iter(d), iter(other)
        return flat_fn(*[next(di) if m else next(oi) for m in mask])

    return jax.vjp(f, *diff)


def lookup(key: Hashable, name: str, make_flat_fn: Callable[[], Callable[..., Any]]) -> _Entry:
    """The cache entry for ``key``, building it with ``make_flat_fn()`` on a miss."""
    try:
        entry = _entries[key]
    except KeyError:
        entry = _Entry(name, make_flat_fn())
        with _lock:
            entry = _entries.setdefault(key, entry)
            while len(_entries) > MAX_CACHED_OPERATIONS:
                _entries.popitem(last=False)
    return entry


OutInfo = tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]
LEAF = jax.tree_util.tree_structure(0)  # the tree structure of a single array


def out_info_of(leaves: list[Any], treedef: Any) -> OutInfo:
    """Static description of an operation's outputs: tree structure, (shape, dtype) per leaf."""
    return treedef, tuple((tuple(x.shape), x.dtype) for x in leaves)


_ones: dict[tuple[tuple[int, ...], Any], jax.Array] = {}  # implicit root gradients, reused


def ones_like(value: Any) -> jax.Array:
    """``ones(value.shape, value.dtype)``, made once per shape and dtype (arrays are immutable)
    and filled on the host (``jnp.ones`` would compile a program per shape)."""
    key = (value.shape, value.dtype)
    ones = _ones.get(key)
    if ones is None:
        ones = _ones[key] = to_device(np.ones(value.shape, value.dtype))
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
    _trace_counts["<backward>"] += 1
    return pullback_body(pullback, cts, out_info)


def apply_vjp(pullback: Any, cts: tuple[Any, ...], out_info: OutInfo) -> tuple[Any, ...]:
    """Run a cached pullback on output cotangents (``None`` = zero); one gradient per diff input.

    Small ones on the CPU run with NumPy (``_host_eval``): no program per shape.
    """
    out = _host_eval.run_pullback(pullback_body, pullback, tuple(cts), out_info)
    if out is NotImplemented:
        out = _apply_vjp(pullback, tuple(cts), out_info)
    return tuple(out)


def host_covers(
    entry: _Entry, mask: tuple[bool, ...], keys: tuple[Hashable, ...], rule: Any
) -> bool:
    """Whether a recorded run of ``entry`` on inputs of aval keys ``keys`` (``_lazy.aval_key``)
    runs with NumPy (``_host_eval``) rather than compiling a program of its own."""
    if rule is not None:
        return _host_eval.covers(entry.host, keys, entry.plain, None)
    fn = functools.partial(_forward_vjp, entry.plain, mask)
    return _host_eval.covers(entry.host, keys, fn, mask, entry.forward_vjp(mask).eval_shape)


def forward_vjp(
    entry: _Entry, mask: tuple[bool, ...], diff: tuple[Any, ...], other: tuple[Any, ...]
) -> tuple[Any, Any]:
    """``entry``'s outputs and pullback: small ones on the CPU with NumPy (``_host_eval``),
    others by the operation's compiled forward-with-VJP."""
    fn = functools.partial(_forward_vjp, entry.plain, mask)
    out = _host_eval.run_vjp(entry, mask, fn, diff, other, entry.forward_vjp(mask).eval_shape)
    if out is NotImplemented:
        out = entry.forward_vjp(mask)(diff, other)
    return out
