"""``check_dist_grads``: distributed autograd against ``jax.grad`` and finite differences.

In the spirit of ``jax.test_util.check_grads``, for code whose loss crosses
workers. ``fn(*args)`` runs three ways:

1. **under test**: over real RPC in a distributed autograd context; every
   floating leaf of ``args`` becomes a Tensor that requires grad (or, with
   ``mode="jax"``, ``jax.grad`` runs through ``differentiable_rpc``), an
   ``RRef`` leaf stands for the parameter its owner holds; the gradients come
   from ``dist_autograd.backward`` + ``get_gradients`` (on each RRef's owner);
2. **oracle**: the same ``fn`` with every RPC run in this process
   (:func:`in_process_rpc`), each leaf a plain JAX value (Tensors that wrap
   ``jax.grad``'s tracers; their tape is never run), differentiated by ``jax.grad``. It
   shares with (1) only the user's code and the forward of the tensor ops:
   no tape, no send/recv edges, no distributed engine, no wire format, no
   custom backward rule, so a wrong rule in any of them shows;
3. **finite differences**: central differences of the oracle's forward, per
   leaf along the distributed gradient's own direction (a wrong scale shows in
   full) and along a random one (a wrong direction shows), which checks (1)
   without trusting JAX's derivative rules either.

The loss compared is ``sum(out * c)`` over ``fn``'s output leaves with fixed
random cotangents ``c`` (a sum alone would hide a permuted gradient). A
failure raises an ``AssertionError`` that names the leaf (its path in
``args``), the comparison, the worst element and the tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax import rpc
from tensorplay_jax.tensors import Tensor
from tensorplay_jax.testing.inprocess import LocalRRef, in_process_rpc

__all__ = ["check_dist_grads", "default_tolerance"]

# dtype -> (atol = rtol against jax.grad, tolerance against finite differences, eps)
_TOLERANCES: dict[Any, tuple[float, float, float]] = {
    np.dtype(np.float64): (1e-9, 1e-5, 1e-6),
    np.dtype(np.float32): (1e-5, 5e-3, 2e-3),
    np.dtype(jnp.bfloat16): (2e-2, 2e-1, 1e-1),
    np.dtype(np.float16): (2e-2, 2e-1, 1e-1),
}


def default_tolerance(dtype: Any) -> tuple[float, float, float]:
    """``(tolerance against jax.grad, tolerance against finite differences, eps)`` for ``dtype``.

    Example:
      >>> default_tolerance("float32")
      (1e-05, 0.005, 0.002)
    """
    return _TOLERANCES.get(np.dtype(dtype), _TOLERANCES[np.dtype(np.float32)])


def _is_leaf(x: Any) -> bool:
    return isinstance(x, Tensor | rpc.RRef)


def _floating(x: Any) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape") and jnp.issubdtype(x.dtype, jnp.inexact)


def _array(x: Any) -> jax.Array:
    return jnp.asarray(x.detach().value if isinstance(x, Tensor) else x)


def _out_leaves(out: Any) -> list[Any]:
    return jax.tree_util.tree_leaves(out, is_leaf=lambda v: isinstance(v, Tensor))


def _cotangents(out: Any, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(o.shape)).astype(np.dtype(o.dtype)) for o in _out_leaves(out)]


def _project(out: Any, cts: Sequence[np.ndarray]) -> Any:
    leaves = _out_leaves(out)
    if len(leaves) != len(cts) or not leaves:
        raise ValueError(f"check_dist_grads: fn returned {len(leaves)} arrays, expected some")
    total = None
    for o, c in zip(leaves, cts, strict=True):
        term = (o * c).sum()
        total = term if total is None else total + term
    return total


class _Leaves:
    """The leaves of ``args``: which are checked (arrays, RRefs) and how to rebuild ``args``."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        paths_leaves, self.treedef = jax.tree_util.tree_flatten_with_path(args, is_leaf=_is_leaf)
        self.paths = ["args" + jax.tree_util.keystr(p) for p, _ in paths_leaves]
        self.raw = [leaf for _, leaf in paths_leaves]
        self.kind = [
            "rref" if isinstance(x, rpc.RRef) else "diff" if _floating(x) else "const"
            for x in self.raw
        ]
        self.checked = [i for i, k in enumerate(self.kind) if k != "const"]
        self.values: dict[int, jax.Array] = {}
        for i in self.checked:
            x = self.raw[i]
            self.values[i] = _array(x.to_here() if self.kind[i] == "rref" else x)
            if not _floating(self.values[i]):
                raise TypeError(f"check_dist_grads: {self.paths[i]} holds a non-floating value")

    def build(self, make: Callable[[int, Any], Any], values: dict[int, Any]) -> Any:
        leaves = [make(i, values[i]) if i in values else x for i, x in enumerate(self.raw)]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def _owner_gradient(context_id: int, rref: rpc.RRef) -> Any:
    """On an RRef's owner: the gradient of its Tensor in ``context_id`` (None: no entry)."""
    g = dist_autograd.get_gradients(context_id).get(rref.local_value())
    return None if g is None else np.asarray(g)


def _distributed(
    fn: Callable[..., Any], lv: _Leaves, mode: str, seed: int
) -> tuple[float, dict[int, Any]]:
    grads: dict[int, Any] = {}
    with dist_autograd.context() as cid:
        if mode == "tape":
            inputs = {
                i: Tensor(v, requires_grad=True)
                for i, v in lv.values.items()
                if lv.kind[i] == "diff"
            }
            out = fn(*lv.build(lambda i, v: v, inputs))
            loss = _project(out, _cotangents(out, seed))
            dist_autograd.backward(cid, [loss])
            got = dist_autograd.get_gradients(cid)
            grads = {i: got.get(t) for i, t in inputs.items()}
            value = float(np.asarray(loss.value))
        else:
            diff = {i: v for i, v in lv.values.items() if lv.kind[i] == "diff"}

            def loss_of(d: dict[int, Any]) -> Any:
                out = fn(*lv.build(lambda i, v: v, d))
                return _project(out, _cotangents(out, seed))

            value_, g = jax.value_and_grad(loss_of)(diff)
            grads, value = dict(g), float(value_)
        for i in lv.checked:
            if lv.kind[i] == "rref":
                rref = lv.raw[i]
                grads[i] = rpc.rpc_sync(rref.owner_name(), _owner_gradient, args=(cid, rref))
    return value, grads


def _oracle_loss(fn: Callable[..., Any], lv: _Leaves, mode: str, seed: int) -> Callable:
    # The leaves require grad as they do under test (code may look at the flag), but no
    # backward ever runs here: jax.grad differentiates the forward values.
    def make(i: int, v: Any) -> Any:
        if lv.kind[i] == "rref":
            return LocalRRef(Tensor(v, requires_grad=True), lv.raw[i].owner_name())
        return Tensor(v, requires_grad=True) if mode == "tape" else v

    def loss(values: dict[int, Any]) -> jax.Array:
        out = fn(*lv.build(make, values))
        total = _project(out, _cotangents(out, seed))
        return total.value if isinstance(total, Tensor) else jnp.asarray(total)

    return loss


def _worst(got: np.ndarray, want: np.ndarray) -> str:
    err = np.abs(got - want)
    at = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    rel = np.max(err / np.maximum(np.abs(want), np.finfo(np.float64).tiny))
    return (
        f"max abs error {float(err[at]):.3g} at index {tuple(int(i) for i in at)} "
        f"(distributed {float(got[at]):.6g}, expected {float(want[at]):.6g}), "
        f"max rel error {float(rel):.3g}"
    )


def _fail(path: str, value: Any, what: str) -> None:
    shape = "x".join(map(str, np.shape(value))) or "scalar"
    raise AssertionError(
        f"check_dist_grads: the gradient of {path} ({np.dtype(value.dtype).name}[{shape}]) "
        f"under distributed autograd {what}"
    )


def check_dist_grads(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    eps: float | None = None,
    mode: str = "tape",
    fd: bool = True,
    seed: int = 0,
) -> None:
    """Check every leaf's distributed-autograd gradient of ``fn(*args)`` (see the module doc).

    Call it where RPC is initialized (e.g. in a test with the ``dist_workers``
    fixture); ``fn`` reaches other workers through ``rpc.rpc_sync``,
    ``rpc.rpc_async``, ``rpc.remote`` / ``RRef.to_here`` or
    ``dist_autograd.differentiable_rpc``, however they were imported.

    Args:
      fn: the loss (or any function) of ``args``; it returns a Tensor, an array
        or a pytree of them.
      args: ``fn``'s positional arguments, a pytree. Floating arrays (or
        Tensors) are checked; an ``rpc.RRef`` to a Tensor that requires grad
        (a parameter its owner holds) is checked on its owner; other leaves
        pass through unchanged.
      atol, rtol: tolerances for both comparisons (default: by dtype,
        :func:`default_tolerance`; the finite-difference one scales with the
        loss's size).
      eps: step of the finite differences (default by dtype).
      mode: ``"tape"``: ``fn`` is tensorplay code on Tensors under
        ``dist_autograd.backward``; ``"jax"``: ``fn`` is JAX code on arrays
        (``differentiable_rpc``) under ``jax.grad`` in a context.
      fd: also compare with finite differences.
      seed: seed of the cotangents and finite-difference directions.

    Raises:
      AssertionError: a gradient (or the loss) differs; the message names the
        leaf by its path in ``args`` (``args[1]['w']``), the worst element,
        the errors and the tolerances.

    Example (in a test with three workers)::

        def loss(w, x):
            h = rpc.rpc_sync("worker1", layer, args=(w, x))
            return rpc.rpc_sync("worker2", layer, args=(w, h)).sum()

        check_dist_grads(loss, (w, x))
    """
    if mode not in ("tape", "jax"):
        raise ValueError(f"check_dist_grads: mode={mode!r}; use 'tape' or 'jax'")
    args = tuple(args)
    lv = _Leaves(args)
    if not lv.checked:
        raise ValueError("check_dist_grads: args holds no floating array or RRef to check")
    value, grads = _distributed(fn, lv, mode, seed)
    loss = _oracle_loss(fn, lv, mode, seed)
    with in_process_rpc():
        want_value, want = jax.value_and_grad(loss)(dict(lv.values))
        _compare(lv, value, float(want_value), grads, want, atol, rtol)
        if fd:
            _finite_differences(lv, loss, float(want_value), grads, atol, rtol, eps, seed)


def _compare(
    lv: _Leaves,
    value: float,
    want_value: float,
    grads: dict[int, Any],
    want: dict[int, Any],
    atol: float | None,
    rtol: float | None,
) -> None:
    tol = max(default_tolerance(v.dtype)[0] for v in lv.values.values())
    if abs(value - want_value) > (atol or tol) + (rtol or tol) * abs(want_value):
        raise AssertionError(
            f"check_dist_grads: the loss over RPC is {value:.6g}, but {want_value:.6g} when every "
            "RPC runs in this process: the forward already differs"
        )
    for i in lv.checked:
        w = np.asarray(want[i])
        g = grads.get(i)
        if g is None:
            if np.any(w):
                _fail(lv.paths[i], w, "is missing (no entry in get_gradients), but jax.grad's "
                      f"is nonzero (max abs {np.max(np.abs(w)):.3g})")  # fmt: skip
            continue
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            _fail(lv.paths[i], w, f"has shape {g.shape} and dtype {g.dtype}: expected both as here")
        a, r = default_tolerance(w.dtype)[0], default_tolerance(w.dtype)[0]
        a, r = atol if atol is not None else a, rtol if rtol is not None else r
        if not np.allclose(g, w, atol=a, rtol=r):
            _fail(
                lv.paths[i],
                w,
                f"differs from jax.grad of the same computation run in one process: "
                f"{_worst(g, w)}; atol={a:g}, rtol={r:g}",
            )


def _finite_differences(
    lv: _Leaves,
    loss: Callable[[dict[int, Any]], jax.Array],
    f0: float,
    grads: dict[int, Any],
    atol: float | None,
    rtol: float | None,
    eps: float | None,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed + 1)
    for i in lv.checked:
        x = lv.values[i]
        _, tol, step = default_tolerance(x.dtype)
        step = eps or step
        g = grads.get(i)
        g64 = np.zeros(x.shape) if g is None else np.asarray(g, np.float64)
        # Along the gradient itself (a wrong scale shows in full) and a random direction
        # (a wrong direction shows there).
        for name, d in (("its own direction", g64), ("a random direction", None)):
            v = rng.standard_normal(x.shape) if d is None or not np.any(d) else d
            v = (v / max(np.linalg.norm(v), 1e-30)).astype(np.dtype(x.dtype))
            plus = float(loss({**lv.values, i: x + step * v}))
            minus = float(loss({**lv.values, i: x - step * v}))
            numeric = (plus - minus) / (2 * step)
            analytic = float(np.vdot(g64, np.asarray(v, np.float64)))
            a = (atol if atol is not None else tol) * max(1.0, abs(f0))
            r = rtol if rtol is not None else tol
            if abs(numeric - analytic) > a + r * max(abs(numeric), abs(analytic)):
                _fail(
                    lv.paths[i],
                    x,
                    f"disagrees with central finite differences along {name} (unit norm): "
                    f"directional derivative {analytic:.6g}, finite differences {numeric:.6g} "
                    f"(eps={step:g}), abs error {abs(numeric - analytic):.3g}; atol={a:.3g}, "
                    f"rtol={r:g}",
                )
