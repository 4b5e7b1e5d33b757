"""Where a speed-up layer plugs into the tape: a recording strategy and a backward planner.

The core tape (nodes, the engine, grad mode, ``call_op``, the compile cache) runs
every recorded operation at once with its compiled forward-with-VJP, and every
backward node by node: the *reference path*. A speed-up layer (the built-in one is
``autograd.speedups``) changes how, never what, through two seams:

``RecordingStrategy`` (``strategy``)
    Consulted by ``call_op``/``call_rule``/``apply``: it may take a recorded
    operation (defer it, replay it as part of a known segment) and it is the
    execution backend for the calls the core does run (``run``, ``run_vjp``,
    ``run_pullback``, ``sum_into``: small CPU ones with NumPy, say). Each method returns
    ``NotImplemented`` to leave the call to the core.
``BackwardPlanner`` (``planner``)
    Tried by ``run_backward`` before its node-by-node pass: it may run the whole
    backward another way (one compiled call) and returns whether it did.

A recorded operation the strategy took leaves its node *pending*: ``node.lazy`` is
a handle with ``flush()`` (run the pending work, giving the node its pullback and
the outputs their values) and ``aval(node, output_nr)`` (an output's
``jax.ShapeDtypeStruct`` before it runs). The core reads pending values through
that handle only (:func:`materialize`, :func:`pending_aval`), so a pending value
made while a layer was on stays readable after :func:`set_deferred` turns it off.

One call installs a layer (:func:`install`; ``tensorplay_jax.autograd`` installs
the built-in one when imported). ``set_deferred(False)`` unplugs both seams: every
operation recorded from then on takes the reference path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tensorplay_jax.autograd._cache import _Entry
    from tensorplay_jax.autograd._node import Node
    from tensorplay_jax.tensors import Tensor

__all__ = [
    "PENDING",
    "BackwardPlanner",
    "RecordingStrategy",
    "assign_value",
    "install",
    "is_pending",
    "materialize",
    "pending_aval",
    "set_deferred",
]

PENDING: Any = type("Pending", (), {"__repr__": lambda self: "<pending value>"})()
"""``call_op``'s stand-in for the value of a pending Tensor (its strategy resolves it)."""


class RecordingStrategy(Protocol):
    """How recorded operations run; each method may return ``NotImplemented`` (core path)."""

    def replay(self, entry: _Entry, args: Sequence[Any], saves: bool) -> Any:
        """``call_op``'s operation on its raw ``args``, before any other work."""

    def record(
        self,
        entry: _Entry,
        values: Sequence[Any],
        tensors: Sequence[Tensor | None],
        mask: tuple[bool, ...],
        saves: bool,
        rule: Any = None,
    ) -> Any:
        """A recorded operation (``values[i]`` is ``PENDING`` for a pending Tensor)."""

    def defer(self, entry: _Entry, values: Sequence[Any], tensors: Sequence[Tensor | None]) -> Any:
        """An unrecorded operation with a pending input (``values[i]`` is ``PENDING``): its
        outputs, pending and requiring no grad, or ``NotImplemented`` (it runs now)."""

    def run(self, entry: _Entry, values: Sequence[Any]) -> Any:
        """An unrecorded forward of ``entry``."""

    def run_vjp(
        self,
        entry: _Entry,
        mask: tuple[bool, ...],
        diff: tuple[Any, ...],
        other: tuple[Any, ...],
    ) -> Any:
        """``entry``'s outputs and pullback for ``mask``."""

    def run_pullback(self, pullback: Any, cts: tuple[Any, ...], out_info: Any) -> Any:
        """One node's backward (``_cache.pullback_body``)."""

    def sum_into(self, held: Any, grad: Any) -> Any:
        """``held + grad`` for a backward's buffer of one tensor's gradients: it may be a
        host ``numpy.ndarray`` (a running sum the engine places before the node runs)."""

    def assign(self, dst: Tensor, src: Tensor) -> None:
        """Give leaf ``dst`` the pending value of ``src`` without running it."""

    def take_assigned(self, dst: Tensor) -> bool:
        """Give ``dst`` a value ``assign`` left pending; whether there was one."""


class BackwardPlanner(Protocol):
    """A backward run another way than node by node; each method says whether it ran."""

    def run_root(self, root: Tensor, accumulate: Any) -> bool:
        """``root.backward()`` of a one-element ``root``, before the graph is walked."""

    def run_graph(
        self,
        starts: list[Node],
        buffers: dict[Node, list[Any]],
        deps: dict[Node, int],
        retain_graph: bool,
        accumulate: Any,
    ) -> bool:
        """The walked graph (the engine's ``starts``, seeded ``buffers`` and ``deps``)."""


strategy: RecordingStrategy | None = None  # None: the reference path (read on the hot path)
planner: BackwardPlanner | None = None
_installed: tuple[RecordingStrategy | None, BackwardPlanner | None] = (None, None)
_deferred = True


def install(new_strategy: RecordingStrategy | None, new_planner: BackwardPlanner | None) -> None:
    """Plug a speed-up layer into the two seams (``None``: that seam stays plain).

    The seams are live unless ``set_deferred(False)`` turned them off.
    """
    global _installed, strategy, planner
    _installed = (new_strategy, new_planner)
    if _deferred:
        strategy, planner = _installed


def set_deferred(flag: bool) -> bool:
    """Turn the installed speed-up layer on (``True``) or off for work recorded from now on.

    Off, every operation runs at once with its compiled forward-with-VJP and every
    backward runs node by node: the reference path the speed-ups are tested against.
    Values recorded before stay readable.

    Returns:
        The previous setting.

    Example:
        >>> import tensorplay_jax as tp
        >>> old = tp.autograd.set_deferred(False)
        >>> tp.autograd.is_pending(tp.ones(2, requires_grad=True) * 2)
        False
        >>> _ = tp.autograd.set_deferred(old)
    """
    global _deferred, strategy, planner
    old, _deferred = _deferred, bool(flag)
    strategy, planner = _installed if _deferred else (None, None)
    return old


def is_pending(t: Tensor) -> bool:
    """Whether ``t``'s value is not computed yet (a strategy holds its operation back)."""
    node = t._grad_fn
    return node is not None and node.lazy is not None


def pending_aval(t: Tensor) -> Any:
    """A pending Tensor's ``jax.ShapeDtypeStruct``; None when it is not pending."""
    node = t._grad_fn
    if node is None:
        return None
    handle = node.lazy
    return None if handle is None else handle.aval(node, t._output_nr)


def materialize(t: Tensor) -> bool:
    """Give ``t`` its value if the tape holds it back (its pending work runs).

    Returns:
        Whether ``t`` was pending (its value is now set).
    """
    node = t._grad_fn
    handle = None if node is None else node.lazy
    if handle is not None:
        handle.flush()
        return True
    layer = _installed[0]
    return layer is not None and layer.take_assigned(t)


def assign_value(dst: Tensor, src: Tensor) -> None:
    """Give leaf ``dst`` the value of ``src`` without recording, leaving a pending
    ``src`` pending until ``dst`` is read (``nn.functional.batch_norm``'s running
    statistics, so a BatchNorm does not cut a deferred forward in two)."""
    layer = _installed[0]
    if layer is not None:
        layer.assign(dst, src)
    else:
        dst._value = src._value
