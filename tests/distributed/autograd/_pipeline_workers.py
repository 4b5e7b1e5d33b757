"""What ``test_pipeline_order.py`` runs on its two stages: w1 (stage A), w2 (stage B)."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable

import tensorplay_jax as tp
from tensorplay_jax.distributed import rpc

WAIT_S = 20.0

# w2: the order its backward units ran in, and whether the second one saw stage A start
# the first one's backward while it waited.
_order: list[int] = []
_a_started: dict[int, threading.Event] = {}
_second_saw_a: list[bool] = []
# Both stages: (wall time, what happened), and w2's thread stacks if its wait ran out;
# the test shows them when it fails.
_events: list[tuple[float, str]] = []
_stacks: list[str] = []


def _note(what: str) -> None:
    _events.append((time.time(), what))


def reset() -> None:
    _order.clear()
    _second_saw_a.clear()
    _a_started.clear()
    _events.clear()
    _stacks.clear()
    for m in (0, 1):
        _a_started[m] = threading.Event()


def tap(x: tp.Tensor, on_backward: Callable[[], None]) -> tp.Tensor:
    """Identity on the tape; ``on_backward()`` runs when the backward passes through it."""

    def backward(grads):
        on_backward()
        return (grads[0],)

    node = tp.autograd.make_node(backward, inputs=(x,), num_outputs=1, name="Tap")
    (y,) = tp.autograd.attach_outputs(node, [x.value])
    return y


def a_started(m: int) -> None:
    """On w2: stage A began micro-batch ``m``'s backward."""
    _note(f"w2 heard that A started {m}")
    _a_started[m].set()


def _b_backward(m: int) -> None:
    _order.append(m)
    _note(f"B backward {m} in {threading.current_thread().name}")
    if len(_order) == 2:  # the second unit: wait (bounded) for stage A to start the first's
        saw = _a_started[_order[0]].wait(WAIT_S)
        _second_saw_a.append(saw)
        _note(f"B's wait ended: saw A start {_order[0]}: {saw}")
        if not saw:
            for tid, frame in sys._current_frames().items():
                _stacks.append(f"thread {tid}:\n" + "".join(traceback.format_stack(frame)))


def stage_b(a: tp.Tensor, m: int) -> tp.Tensor:
    """On w2: ``3 a``; its backward records its order and may wait (see ``_b_backward``)."""
    return tap(a, lambda: _b_backward(m)) * 3.0


def stage_a(x: tp.Tensor, m: int) -> tp.Tensor:
    """On w1: ``2 x``, then stage B; its backward tells w2 when it starts."""

    def started() -> None:
        _note(f"A backward {m} starts in {threading.current_thread().name}")
        rpc.rpc_sync("w2", a_started, args=(m,))

    a = tap(x * 2.0, started)
    return rpc.rpc_sync("w2", stage_b, args=(a, m))


def what_b_saw() -> tuple[list[int], list[bool]]:
    return list(_order), list(_second_saw_a)


def events() -> tuple[list[tuple[float, str]], list[str]]:
    """This stage's timeline and (w2, if its wait ran out) every thread's stack then."""
    return list(_events), list(_stacks)
