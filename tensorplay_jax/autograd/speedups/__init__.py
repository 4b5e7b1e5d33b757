"""The tape's speed-up layer: deferred recording, segment programs, compiled backwards, NumPy.

The core tape (``autograd``'s other modules) runs each recorded operation at once
and each backward node by node. This layer plugs into its two seams
(``autograd._seams``) and changes how that work runs, not what it computes (to float
rounding: a compiled program may fuse operations and round an ulp apart):

Recording strategy (:class:`DeferredRecording`)
    ``_lazy``: a recorded operation is deferred into its thread's *segment*; a
    segment of a recurring *pattern* (``_pattern``, a trie of operation sequences)
    runs as one compiled program. ``_replay``: the next operation of a recurring
    step is checked against the pattern's last one instead of being keyed anew.
    ``_host_eval`` (with ``_numpy_prims``): the CPU execution backend; small calls
    on the CPU run with NumPy instead of compiling a program per shape.
    ``_assign``: a leaf given a pending value without recording.
Backward planner (:class:`CompiledBackward`)
    ``_fused``: a backward whose graph shape recurs runs as one compiled call (with
    its pending forward, when it has one); ``_known``: a recurring backward from one
    pending root runs without walking the graph.

All of the layer's mutable state is one object, ``_state.STATE`` (:func:`clear`).
:func:`install` plugs the layer in; ``tensorplay_jax.autograd`` calls it once when
imported. A new speed-up is one module here plus one line in the strategy or planner
below.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd import speedups
    >>> w = tp.ones(3, requires_grad=True)
    >>> (w * 2).sum().backward()
    >>> speedups.clear()  # forget learned patterns and programs; results do not change
    >>> w.grad
    tensor([2., 2., 2.])
"""

from __future__ import annotations

from tensorplay_jax.autograd import _seams
from tensorplay_jax.autograd.speedups import _assign, _fused, _host_eval, _known, _lazy, _replay
from tensorplay_jax.autograd.speedups._state import STATE
from tensorplay_jax.runtime import pending

__all__ = ["CompiledBackward", "DeferredRecording", "clear", "install"]


class DeferredRecording:
    """The recording strategy: deferral and replay, with NumPy as the CPU backend."""

    replay = staticmethod(_replay.replay)
    record = staticmethod(_lazy.record)
    defer = staticmethod(_lazy.defer)
    run = staticmethod(_host_eval.run)
    run_vjp = staticmethod(_host_eval.run_vjp)
    run_pullback = staticmethod(_host_eval.run_pullback)
    sum_into = staticmethod(_host_eval.sum_into)
    assign = staticmethod(_assign.assign)
    take_assigned = staticmethod(_assign.take_assigned)


class CompiledBackward:
    """The backward planner: a known backward first, then a fused one."""

    run_root = staticmethod(_known.try_pending)
    run_graph = staticmethod(_fused.try_fused)


def install() -> None:
    """Plug this layer into the tape's seams, and run a thread's deferred work at each
    served RPC call's end (``runtime.pending``). Calling it again changes nothing."""
    _seams.install(DeferredRecording(), CompiledBackward())
    pending.unregister(_lazy.flush_current)
    pending.register(_lazy.flush_current)


def clear() -> None:
    """Forget what the layer learned (``STATE.clear``): patterns, counts, kept programs."""
    STATE.clear()
