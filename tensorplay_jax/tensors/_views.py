"""Views and in-place writes: a write to a Tensor reaches its base and every live view of it.

JAX arrays are immutable, so an in-place operation computes the new value (as a
recorded node, when grad mode is on) and *rebinds* the Tensor to it. To keep
torch's storage semantics on top of that, a Tensor made by a view operation
(basic indexing, ``narrow``, ``view``/``reshape``, ``transpose``, ``detach``,
``.data`` ...) remembers its base and two functions (``ViewOf``):

* ``read(base) -> Tensor``: the view's value taken from the base (``base[idx]``);
* ``write(base, view) -> Tensor``: the base's new value once the view changed
  (``index_put(base, idx, view)``).

``commit(t, new)`` rebinds ``t`` to ``new``, bumps ``t._version``, then walks up
(each base is rebound to ``write(base, view)``) and down (each live view is
re-read from its changed base), so ``r = tp.zeros(4); c = r[1:3]; c[0] = 5.``
leaves ``r`` as ``[0, 5, 0, 0]``, and a later ``r[2] = 7.`` shows in ``c``. In grad
mode every step is a recorded node, so gradients flow through the writes as in
torch (``CopySlices``). A *detached* view (``detach``, ``.data``) shares values
only: its writes reach the base without touching the base's graph.

A base holds its views weakly (``_views``). A view holds its base strongly, as
in torch, except a detached one: it holds its base weakly, so that keeping
``loss.detach()`` does not keep ``loss``'s graph alive (once the base is gone,
nothing else can see the write).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from tensorplay_jax.autograd import is_grad_enabled, no_grad

if TYPE_CHECKING:
    from tensorplay_jax.tensors._tensor import Tensor

_LEAF_MSG = (
    "a leaf Variable that requires grad is being used in an in-place operation "
    "({op}); do it under tp.no_grad() (as optimisers and nn.init do), or on t.clone()"
)
_LEAF_VIEW_MSG = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation "
    "({op}); do it under tp.no_grad(), or on a clone of the leaf"
)


class ViewOf(NamedTuple):
    """How a view relates to its base (see the module docstring)."""

    ref: Any  # the base Tensor; a weakref to it when not linked
    read: Callable[[Tensor], Tensor]
    write: Callable[[Tensor, Tensor], Tensor]
    linked: bool  # False for detach/.data: values shared, graphs separate

    @property
    def base(self) -> Tensor | None:
        """The base Tensor (None: a detached view whose base is gone)."""
        return self.ref if self.linked else self.ref()


class ViewRefs(list):
    """A base's views, held weakly: a list of ``weakref.ref``, dead ones dropped as it grows.

    Lighter than a ``weakref.WeakSet`` (one object and a weak reference per view,
    against a WeakSet's seven objects and its callbacks): a base made each step
    (a view of a view of an operation's output) would otherwise add the WeakSet's
    objects to every garbage collection while the step's graph lives. The dead
    references are dropped when the list reaches ``prune_at``, which then doubles
    past what is left, so adding a view costs O(1) amortized.
    """

    __slots__ = ("prune_at",)

    def __init__(self, first: Tensor) -> None:
        super().__init__((weakref.ref(first),))
        self.prune_at = 8

    def add(self, view: Tensor) -> None:
        """Hold ``view`` (weakly)."""
        self.append(weakref.ref(view))
        if len(self) >= self.prune_at:
            self[:] = [r for r in self if r() is not None]
            self.prune_at = max(8, 2 * len(self))

    def live(self) -> list[Tensor]:
        """The views still alive."""
        out = []
        for r in self:
            v = r()
            if v is not None:
                out.append(v)
        return out


def link(
    view: Tensor,
    base: Tensor,
    read: Callable[[Tensor], Tensor],
    write: Callable[[Tensor, Tensor], Tensor],
    *,
    linked: bool = True,
) -> Tensor:
    """Make ``view`` a view of ``base``; returns ``view``."""
    view._view = ViewOf(base if linked else weakref.ref(base), read, write, linked)
    views = base._views
    if views is None:
        base._views = ViewRefs(view)
    else:
        views.add(view)
    return view


def _same(base: Tensor) -> Tensor:
    return base


def _replace(base: Tensor, view: Tensor) -> Tensor:
    return view


def detached_view(base: Tensor) -> Tensor:
    """``base.detach()``: a new leaf sharing ``base``'s value (writes cross, gradients do not)."""
    out = type(base)._wrap(base._value)
    return link(out, base, _same, _replace, linked=False)


def check_writable(t: Tensor, op: str) -> None:
    """Raise torch's error for a write to a grad leaf (or a view of one) in grad mode."""
    if not is_grad_enabled():
        return
    if t._requires_grad and t._grad_fn is None and t._view is None:
        raise RuntimeError(_LEAF_MSG.format(op=op))
    root, view = t, t._view
    while view is not None and view.linked:
        root = view.ref
        view = root._view
    if root is not t and root._requires_grad and root._grad_fn is None and root._view is None:
        raise RuntimeError(_LEAF_VIEW_MSG.format(op=op))


def _rebind(t: Tensor, new: Tensor, linked: bool) -> None:
    """Give ``t`` the value (and, in grad mode, the history) of ``new``; bump its version."""
    value = new._value
    node = new._grad_fn if new._requires_grad else None
    saved = getattr(node, "saved", None)
    if saved and any(s is t for s in saved):  # the write's node holds t's old value itself
        keep = [i for i, s in enumerate(saved) if s is not t]
        node.saved = tuple(saved[i] for i in keep)
        node.versions = tuple(node.versions[i] for i in keep)
        node.keep_operand(t, t._value)  # (its recorded backward reads the old value too)
    t._value = value
    if linked and node is not None:
        t._grad_fn, t._output_nr, t._requires_grad = node, new._output_nr, True
    t._version += 1


def commit(t: Tensor, new: Tensor) -> Tensor:
    """Finish an in-place operation on ``t`` whose result is ``new``; returns ``t``.

    ``new`` was computed from ``t``'s current value (recorded in grad mode, with
    ``t`` as an input, so the node stands for the write). The write then
    reaches ``t``'s bases and views (module docstring).
    """
    _rebind(t, new, True)
    child, view = t, t._view
    while view is not None:
        base = view.base
        if base is None:
            break
        with contextlib.nullcontext() if view.linked else no_grad():
            new_base = view.write(base, child)
        _rebind(base, new_base, view.linked)
        _refresh_views(base, skip=child)
        child, view = base, base._view
    _refresh_views(t, skip=None)
    return t


def _refresh_views(base: Tensor, skip: Tensor | None) -> None:
    """Re-read every live view of ``base`` (and theirs) after ``base`` changed."""
    stack = [(base, skip)]
    while stack:
        b, s = stack.pop()
        if not b._views:
            continue
        for v in b._views.live():
            if v is s:
                continue
            info = v._view
            assert info is not None
            with contextlib.nullcontext() if info.linked else no_grad():
                _rebind(v, info.read(b), info.linked)
            stack.append((v, None))


def overwrite(t: Tensor, value: Any) -> None:
    """Give ``t`` the array ``value`` as an optimiser's in-place update does.

    Nothing is recorded (the write is not part of any graph), ``t._version`` is
    bumped, so a node that saved ``t`` before the write refuses to run backward
    on the stale value, and the write reaches ``t``'s base and live views, as
    torch's ``param.add_(...)`` under ``no_grad`` does.
    """
    with no_grad():
        commit(t, type(t)._wrap(value))
