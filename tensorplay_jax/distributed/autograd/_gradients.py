"""The gradients a distributed autograd context holds for this worker's leaves.

:class:`ContextGradients` is the context's ``accumulate`` (an
``autograd.Accumulator``): every backward run of the context on this worker hands it
the gradients of the leaves it reached, and it sums them per leaf. A fused backward
takes what it holds for the leaves and sums them in one compiled call after its own; a
sum this store computed and has not handed out (:meth:`ContextGradients.hand_out`)
is seen by no one else, so that call may take it donated and write the next sum
into its buffer: a pipeline's micro-batches accumulate a weight's gradient in one
buffer. A gradient stored as it arrived (the first one, or one received over RPC)
may be shared, and is never donated.

Example:
    >>> import jax.numpy as jnp
    >>> import tensorplay_jax as tp
    >>> grads, w = ContextGradients(), tp.ones(2, requires_grad=True)
    >>> grads(w, jnp.ones(2))
    >>> grads(w, jnp.ones(2))
    >>> grads.hand_out()[w]
    Array([2., 2.], dtype=float32)
"""

from __future__ import annotations

import threading
from typing import Any

import jax

from tensorplay_jax.autograd import Accumulator, add_gradients
from tensorplay_jax.runtime.device import on_device
from tensorplay_jax.tensors import Tensor

__all__ = ["ContextGradients"]


class ContextGradients(Accumulator):
    """Leaf -> summed gradient, thread-safe; claims what it hands to a fused backward."""

    claims = True
    sums_only = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._grads: dict[Tensor, jax.Array] = {}
        self._owned: set[Tensor] = set()  # leaves whose sum no one else has seen

    def __call__(self, leaf: Tensor, grad: Any) -> None:
        with self._lock:
            old = self._grads.get(leaf)
            if old is None:
                self._grads[leaf] = grad
                self._owned.discard(leaf)
            else:
                self._grads[leaf] = add_gradients(old, grad, donate=leaf in self._owned)
                self._owned.add(leaf)

    def take(self, leaf: Tensor) -> tuple[Any, bool]:
        with self._lock:
            held = self._grads.pop(leaf, None)  # the caller's now: put() stores the sum
            if held is None:
                return None, False
            donated = leaf in self._owned
            self._owned.discard(leaf)
            return held, donated

    def put(self, leaf: Tensor, held: Any, donated: bool, grad: Any, total: Any) -> None:
        if total is not None:
            with self._lock:
                if leaf not in self._grads:
                    self._grads[leaf] = total
                    self._owned.add(leaf)
                    return
        self(leaf, grad if total is None else total)  # another run stored one meanwhile

    def get(self, leaf: Tensor) -> Any:
        """The gradient held for ``leaf`` (None: none yet)."""
        with self._lock:
            return self._grads.get(leaf)

    def replace(self, leaf: Tensor, grad: Any) -> None:
        """Hold ``grad`` as ``leaf``'s gradient in place of what was summed (data parallel
        training writes the averaged gradient back here)."""
        with self._lock:
            self._grads[leaf] = grad
            self._owned.discard(leaf)

    def hand_out(self) -> dict[Tensor, jax.Array]:
        """A new leaf -> gradient map, as ``jax.Array`` s; none of them is reused later."""
        with self._lock:
            for leaf, g in self._grads.items():
                self._grads[leaf] = on_device(g)  # a host array arrived over RPC
            self._owned.clear()
            return dict(self._grads)

    def clear(self) -> None:
        with self._lock:
            self._grads.clear()
            self._owned.clear()
