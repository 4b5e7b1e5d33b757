"""The reducer: all-reduces a DDP module's gradients in buckets during the backward pass.

Each parameter has a post-accumulate-grad hook (``Tensor.register_post_accumulate_grad_hook``).
When a backward pass that a synced forward prepared (:meth:`Reducer.prepare`)
accumulates a parameter's gradient, the hook marks it ready; when every parameter of
a bucket is ready, and every bucket before it has gone, the bucket's flat gradient
goes to the communication hook on the communication thread (``_comm``), while the
backward pass goes on. The first hook of a pass queues :meth:`Reducer.finalize` for
the pass's end (``autograd.queue_callback``): it waits for every bucket (with a
timeout), and writes the averaged gradients back to where the pass put them:
``param.grad``, or, in a distributed autograd backward, the context's gradients.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.process_group as dist
from tensorplay_jax.autograd import AccumulateGrad, Node, queue_callback
from tensorplay_jax.autograd.sparse_arrays import is_sparse_array
from tensorplay_jax.distributed.autograd._engine import current_accumulator
from tensorplay_jax.distributed.autograd._gradients import ContextGradients
from tensorplay_jax.distributed.parallel import _comm
from tensorplay_jax.distributed.parallel._bucket import Bucket, GradBucket, assign_buckets
from tensorplay_jax.futures import Future
from tensorplay_jax.runtime import trace
from tensorplay_jax.tensors import Tensor

__all__ = ["CommHook", "Reducer", "reached_leaves"]

CommHook = Callable[[Any, GradBucket], Future[Any]]


def reached_leaves(outputs: Sequence[Tensor]) -> set[int]:
    """``id`` s of the leaves a backward pass from ``outputs`` would reach (the graph walk
    of ``find_unused_parameters``)."""
    seen: set[Node] = set()
    stack: list[Node] = []
    for t in outputs:
        if t.requires_grad:
            node = t._gradient_edge().node
            if node not in seen:
                seen.add(node)
                stack.append(node)
    leaves: set[int] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, AccumulateGrad):
            leaves.add(id(node.variable))
            continue
        for edge in node.next_edges:
            if edge is not None and edge.node not in seen:
                seen.add(edge.node)
                stack.append(edge.node)
    return leaves


def _hook(reducer: weakref.ref[Reducer], i: int, param: Tensor) -> None:
    live = reducer()
    if live is not None:
        live._on_grad(i, param)


def _remove_all(handles: list[Any]) -> None:
    for h in handles:
        h.remove()


class _IntoGrad:
    """Gradients in ``param.grad`` (a local backward pass)."""

    @staticmethod
    def get(p: Tensor) -> Any:
        return None if p.grad is None else p.grad._value

    @staticmethod
    def replace(p: Tensor, value: Any) -> None:
        p.grad = Tensor._wrap(value)


class Reducer:
    """Buckets, hooks and the per-iteration state of one DDP module's gradient reduction.

    Args:
        params: the parameters that require grad, in registration order.
        names: their dotted names (for error messages).
        group: the process group (None: the default group).
        bucket_cap_bytes: the bucket size cap.
        first_bucket_cap_bytes: the first bucket's cap.
        find_unused: mark parameters the forward's outputs do not reach as ready with a
            zero gradient (``find_unused_parameters=True`` or ``static_graph=True``).
        timeout: seconds the end of a backward pass waits for each bucket.
    """

    def __init__(
        self,
        params: list[Tensor],
        names: list[str],
        group: Any,
        bucket_cap_bytes: int,
        first_bucket_cap_bytes: int,
        find_unused: bool,
        timeout: float,
    ) -> None:
        self.params = params
        self.names = names
        self.group = group
        self.find_unused = find_unused
        self.timeout = timeout
        self.buckets: list[Bucket] = assign_buckets(
            params, bucket_cap_bytes, first_bucket_cap_bytes
        )
        self.bucket_of = {i: b for b in self.buckets for i in b.params}
        self.world_size = dist.get_world_size(group)
        self.div = self.world_size  # what each gradient sum is divided by
        self.comm_state: Any = None
        self.comm_hook: CommHook | None = None
        self._lock = threading.Lock()
        self.expect = False  # a synced forward prepared the next backward pass
        self.started = False  # that pass's first hook has run
        self.unfinished: list[int] | None = None  # params a finished pass never made ready
        self._unused: list[int] = []
        # parameters that got a gradient in a backward pass without sync (``no_sync``) since
        # the last synced one: torch counts them as used at the next sync, so their
        # accumulated gradients are averaged and written on every rank
        self._used_unsynced = np.zeros(len(params), np.int32)
        me = weakref.ref(self)  # the parameters' hooks do not keep this reducer alive
        self._handles = [
            p.register_post_accumulate_grad_hook(functools.partial(_hook, me, i))
            for i, p in enumerate(params)
        ]
        weakref.finalize(self, _remove_all, list(self._handles))

    # ------------------------------------------------------------------ per iteration
    def prepare(self, outputs: Sequence[Tensor]) -> None:
        """A synced forward ran: the next backward pass reduces (torch's
        ``prepare_for_backward``); ``outputs`` are the forward's Tensors.

        Raises:
            RuntimeError: the previous pass did not make every parameter ready (a
                parameter unused without ``find_unused_parameters=True``).
        """
        self.check_prior_finished()
        with self._lock:
            self.expect = True
            self.started = False
            self._ready = [False] * len(self.params)
            self._used = np.zeros(len(self.params), np.int32)
            self._next = 0
            self._futures: list[Future[Any]] = []
            self._store: Any = _IntoGrad
            for b in self.buckets:
                b.pending = len(b.params)
            if self.find_unused:
                reached = reached_leaves(outputs)
                self._unused = [i for i, p in enumerate(self.params) if id(p) not in reached]

    def skip(self) -> None:
        """A forward without gradient sync ran (``no_sync``, or no grad): hooks do nothing."""
        self.expect = False

    def check_prior_finished(self) -> None:
        """Raise torch's error when the last backward pass left parameters unreduced."""
        missing, self.unfinished = self.unfinished, None
        if not missing:
            return
        rank = dist.get_rank()
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a "
            "new one. This error indicates that your module has parameters that were not "
            "used in producing loss. You can enable unused parameter detection by passing "
            "the keyword argument `find_unused_parameters=True` to "
            "`tensorplay_jax.nn.parallel.DistributedDataParallel`, and by making sure all "
            "`forward` function outputs participate in calculating loss.\n"
            f"Parameter indices which did not receive grad for rank {rank}: "
            + " ".join(str(i) for i in missing)
            + f"\nParameters which did not receive grad for rank {rank}: "
            + ", ".join(self.names[i] for i in missing)
        )

    def _on_grad(self, i: int, param: Tensor) -> None:
        """Post-accumulate-grad hook of parameter ``i``."""
        if not self.expect:
            self._used_unsynced[i] = 1
            return
        with self._lock:
            if not self.started:
                self.started = True
                acc = current_accumulator()
                self._store = acc if isinstance(acc, ContextGradients) else _IntoGrad
                queue_callback(self.finalize)
                for j in self._unused:
                    self._mark_ready(j)
            self._used[i] = 1
            self._mark_ready(i)

    def _mark_ready(self, i: int) -> None:
        if self._ready[i]:
            raise RuntimeError(
                f"Expected to mark a variable ready only once: parameter {self.names[i]!r} "
                f"(index {i}) got its gradient twice in one backward pass. Using a module "
                "parameter outside the `forward` function, or a backward pass started "
                "from inside another, causes this."
            )
        self._ready[i] = True
        self.bucket_of[i].pending -= 1
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            self._launch(self.buckets[self._next])
            self._next += 1

    def _launch(self, b: Bucket) -> None:
        grads = []
        for i in b.params:
            g = self._store.get(self.params[i])
            grads.append(g.todense() if g is not None and is_sparse_array(g) else g)
        flat = Tensor._wrap(b.flatten(grads))
        params = [self.params[i] for i in b.params]
        bucket = GradBucket(b.index, flat, params, b, b.index == len(self.buckets) - 1)
        self._futures.append(_comm.submit(functools.partial(self.run_hook, bucket)))

    def run_hook(self, bucket: GradBucket) -> Any:
        """The communication hook on ``bucket`` (on the communication thread): its result;
        while profiling, in a span ``ddp.bucket`` (its index and bytes)."""
        if not trace.RECORDING:
            return self._reduce(bucket)
        span = trace.begin("ddp.bucket", "ddp")
        try:
            return self._reduce(bucket)
        finally:
            span.end(index=bucket.index(), bytes=int(bucket.buffer().value.nbytes))

    def _reduce(self, bucket: GradBucket) -> Any:
        if self.comm_hook is None:
            reduced = dist.all_reduce(bucket.buffer().value / self.div, group=self.group)
        else:
            fut = self.comm_hook(self.comm_state, bucket)
            if not isinstance(fut, Future):
                raise TypeError(
                    "a DDP communication hook must return a tensorplay_jax.futures.Future of "
                    f"the reduced bucket; it returned {type(fut).__name__}"
                )
            reduced = fut.wait(self.timeout)
        return reduced.value if isinstance(reduced, Tensor) else reduced

    def finalize(self) -> None:
        """The backward pass ended: wait for every bucket, write the averaged gradients."""
        with self._lock:
            self.expect = False
            futures, store = self._futures, self._store
            done = self._next == len(self.buckets)
            if not done:
                self.unfinished = [i for i, r in enumerate(self._ready) if not r]
            used = None
            if self.find_unused and done:
                local = np.maximum(self._used, self._used_unsynced)
                self._used_unsynced = np.zeros_like(self._used_unsynced)
                used = _comm.submit(lambda: dist.all_reduce(local, group=self.group))
        span = trace.begin("ddp.wait", "ddp") if trace.RECORDING else None
        try:
            results = [self._wait(f, k) for k, f in enumerate(futures)]
        finally:
            if span is not None:
                span.end(buckets=len(futures))
        if not done:
            return  # torch's error is raised at the next synced forward
        globally_used = None if used is None else np.asarray(self._wait(used, -1)) > 0
        for b, flat in zip(self.buckets, results, strict=True):
            for i, g in zip(b.params, b.split(flat), strict=True):
                if globally_used is None or globally_used[i]:
                    store.replace(self.params[i], g.astype(self.params[i].dtype))

    def _wait(self, fut: Future[Any], k: int) -> Any:
        try:
            return fut.wait(self.timeout)
        except TimeoutError as e:
            what = "the unused-parameter map" if k < 0 else f"bucket {k}"
            raise TimeoutError(
                f"DistributedDataParallel: {what} was not reduced within {self.timeout:g} s; "
                "another rank did not run the same backward pass (uneven inputs need "
                "`with model.join():`)"
            ) from e

    # ------------------------------------------------------------------ joined ranks
    def shadow_backward(self) -> None:
        """On a rank out of inputs (``join``): the collectives of one backward pass of the
        others, with zero gradients, so that they complete."""
        futures = []
        for b in self.buckets:
            flat = Tensor._wrap(jnp.zeros(b.numel, b.dtype))
            params = [self.params[i] for i in b.params]
            bucket = GradBucket(b.index, flat, params, b, b.index == len(self.buckets) - 1)
            futures.append(_comm.submit(functools.partial(self.run_hook, bucket)))
        if self.find_unused:
            zeros = np.zeros(len(self.params), np.int32)
            futures.append(_comm.submit(lambda: dist.all_reduce(zeros, group=self.group)))
        for k, f in enumerate(futures):
            self._wait(f, k)

    def remove_hooks(self) -> None:
        """Unregister every parameter hook (done anyway once this reducer is collected)."""
        _remove_all(self._handles)
