"""Where a backward pass puts each leaf's gradient: the ``accumulate`` seam of ``run_backward``.

``run_backward(..., accumulate=f)`` calls ``f(leaf, grad)`` once per reached leaf, and
any callable will do. An :class:`Accumulator` also tells a compiled backward (the
speed-up layer's ``_fused``, ``_known``) what it holds for each leaf (:meth:`~Accumulator.take`),
so that the sums ``held + grad`` of all the leaves come from one small compiled call
after the backward's (only the sums, for an accumulator whose ``sums_only`` is set;
:meth:`~Accumulator.put` stores them): a loop of micro-batches accumulates each
parameter's gradient with one call per pass, not one per leaf. The backward's own
program does not depend on what is held, so it compiles once per graph shape. An
accumulator may also give its held array up: that call then takes it *donated*
(``jax.jit(donate_argnums=...)``) and writes the sum into its buffer, where a new sum
would cost a fresh allocation (page faults for a large weight). It gives up only
arrays that no one else can see.

Two accumulators are made here: :data:`accumulate_into_grad` (``leaf.grad``, the local
engine's default) never donates, since a user may hold ``p.grad``; the distributed
autograd context's (``distributed.autograd._gradients``) donates the sums it computed
itself and has not handed out. Both take only the sums.

Example:
    >>> import tensorplay_jax as tp
    >>> x = tp.ones(2, requires_grad=True)
    >>> accumulate_into_grad(x, tp.ones(2)._value)
    >>> accumulate_into_grad(x, tp.ones(2)._value)
    >>> x.grad
    tensor([2., 2.])
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax

from tensorplay_jax.autograd import _cache, _seams, sparse_arrays
from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.runtime import xla_options

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

__all__ = ["Accumulator", "accumulate_into_grad", "accumulator", "add_gradients"]

_add_program = xla_options.jit(operator.add)
_add_donated = xla_options.jit(operator.add, donate_argnums=0)
_difference = xla_options.jit(operator.sub)
_GRADIENT_SUM = _cache._Entry("GradientSum", operator.add)


def add_gradients(a: Any, b: Any, *, donate: bool = False) -> jax.Array:
    """``a + b`` for two gradients of one tensor, compiled as our own programs are
    (``runtime.xla_options``), or by the installed execution backend
    (``_seams.strategy``: small ones on the CPU with NumPy, where a distributed
    context sums each parameter's gradients, a program per shape otherwise).
    ``donate=True``: ``a`` is the caller's alone, and its buffer takes the sum.
    A sparse gradient (a BCOO) follows torch's rule: sparse + sparse stays sparse,
    sparse + dense is dense (``sparse_arrays.add``).

    Example:
        >>> import jax.numpy as jnp
        >>> add_gradients(jnp.ones(2), jnp.ones(2)).tolist()
        [2.0, 2.0]
    """
    if sparse_arrays.is_sparse_array(a) or sparse_arrays.is_sparse_array(b):
        return sparse_arrays.add(a, b)
    strategy = _seams.strategy
    if strategy is not None:
        out = strategy.run(_GRADIENT_SUM, (a, b))
        if out is not NotImplemented:
            return out
    if donate and type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype:
        return _add_donated(a, b)
    return _add_program(a, b)


class Accumulator:
    """Where leaf gradients go: ``acc(leaf, grad)`` adds ``grad``; :meth:`take` and
    :meth:`put` let a compiled backward compute the sum with what is held.

    A subclass implements ``__call__``; the defaults of :meth:`take` and :meth:`put`
    hold nothing and add, which is what any plain ``accumulate`` callable does.
    ``claims``: :meth:`take` removes what it returns (what was held stays visible
    otherwise). ``sums_only``: :meth:`put` needs only the sum for a leaf that held
    something, so a compiled backward returns no separate gradient for it (no buffer
    no one reads).
    """

    claims = False
    sums_only = False

    def __call__(self, leaf: Tensor, grad: Any) -> None:
        raise NotImplementedError

    def take(self, leaf: Tensor) -> tuple[Any, bool]:
        """``(held, donated)``: the array held for ``leaf`` (None: nothing), and whether
        the caller may donate it (only where :attr:`claims`). What a claiming
        accumulator returns is no longer held here: the caller must :meth:`put` the
        sum (or, if it cannot compute one, give the array back with ``self(leaf, held)``,
        :func:`give_back`)."""
        return None, False

    def put(self, leaf: Tensor, held: Any, donated: bool, grad: Any, total: Any) -> None:
        """Store ``total`` (``held + grad``; None where ``held`` was None, and then
        ``grad``) as ``leaf``'s gradient; when something else was stored since
        :meth:`take`, add ``total`` (claimed) or ``grad`` to that instead."""
        self(leaf, grad if total is None else total)


def fold_mode(acc: Accumulator | None) -> bool | None:
    """How a compiled backward treats ``acc``: None (a plain callable: no sums), False
    (sums, and each gradient too), True (``sums_only``: only the sums where it held)."""
    return None if acc is None else acc.sums_only


def accumulator(accumulate: Any) -> Accumulator | None:
    """``accumulate`` if it is an :class:`Accumulator` (the fused backward then sums in
    its program), else None (a plain callable takes each gradient as it is)."""
    return accumulate if isinstance(accumulate, Accumulator) else None


def take_all(acc: Accumulator | None, leaves: Sequence[Tensor]) -> list[tuple[Any, bool]]:
    """``acc.take`` for each leaf (nothing held when ``acc`` is None)."""
    if acc is None:
        return [(None, False)] * len(leaves)
    return [acc.take(leaf) for leaf in leaves]


def split(taken: Sequence[tuple[Any, bool]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``take_all``'s answers as a compiled backward takes them: the held arrays it must
    keep, and (donated) those it may write the sums into; None where the other has it."""
    held = tuple(None if donated else h for h, donated in taken)
    return held, tuple(h if donated else None for h, donated in taken)


def give_back(
    acc: Accumulator | None, leaves: Sequence[Tensor], taken: Sequence[tuple[Any, bool]]
) -> None:
    """After a compiled backward failed: what a claiming ``acc`` handed out goes back
    (a donated array the failed call consumed is lost with the pass)."""
    if acc is None or not acc.claims:
        return
    for leaf, (h, donated) in zip(leaves, taken, strict=True):
        if h is not None and not (donated and h.is_deleted()):
            acc(leaf, h)


_grad_lock = threading.Lock()


class _IntoGrad(Accumulator):
    """``leaf.grad += grad`` (safe across threads); holds ``leaf.grad`` and never donates
    it (the user may hold that Tensor or its array). It takes only the sums: when another
    thread replaced ``leaf.grad`` between :meth:`take` and :meth:`put` (rare: two
    backward passes into one leaf at once), the gradient is ``total - held``."""

    sums_only = True

    def __call__(self, leaf: Tensor, grad: Any) -> None:
        with _grad_lock:
            if leaf._grad is None:
                leaf._grad = _tc.Tensor._wrap(grad)
            else:
                leaf._grad = _tc.Tensor._wrap(add_gradients(leaf._grad._value, grad))

    def take(self, leaf: Tensor) -> tuple[Any, bool]:
        grad = leaf._grad
        if grad is None or sparse_arrays.is_sparse_array(grad._value):
            return None, False  # a sparse .grad is summed by add_gradients, not in a program
        return grad._value, False

    def put(self, leaf: Tensor, held: Any, donated: bool, grad: Any, total: Any) -> None:
        if total is not None:
            with _grad_lock:
                now = None if leaf._grad is None else leaf._grad._value
                if now is held:
                    leaf._grad = _tc.Tensor._wrap(total)
                    return
            if grad is None:
                grad = _difference(total, held)
        self(leaf, grad)  # another pass accumulated into it meanwhile, or nothing was held

    def __repr__(self) -> str:
        return "accumulate_into_grad"


accumulate_into_grad = _IntoGrad()
"""The local engine's ``accumulate``: add a gradient into ``leaf.grad`` (thread-safe)."""
