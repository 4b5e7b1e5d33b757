"""The distributed backward engine: local tape passes joined by gradient RPCs.

One backward pass over a context is a tree of *tasks*, one per worker visit:

* ``backward(ctx_id, roots)`` starts a task on the calling worker and runs the
  local tape from ``roots`` (``autograd.run_backward``; leaf gradients go into
  the context, never into ``Tensor.grad``).
* When the local pass reaches a recv node (a Tensor that arrived over RPC),
  the node's cotangents leave at once, while the pass goes on: one
  ``_apply_gradients`` RPC to the worker that sent the Tensor, keyed by that
  message. Gradients for this worker itself run in the same task after the
  pass, and gradients for the worker that called this task ride back in its
  reply (one round trip saved per return hop).
* ``_apply_gradients`` (an ``async_execution`` target: no thread waits) starts
  a task there that runs the local tape from the send edges of that message;
  its reply is due when its own outgoing RPCs have answered.

So the peers' passes overlap the caller's, as in torch's engine: in a
pipeline, the last stage's gradient for micro-batch 0 reaches the stage
before it while the last stage still works on micro-batch 1. The local runs
of one context on one worker go one at a time, in arrival order
(``_serial``): runs sharing one worker's cores would all end late together,
while one at a time the first micro-batch's gradients are done, and leave,
first; a run queued behind another costs no waiting thread.

The final callbacks that hooks queue (``autograd.queue_callback``: DDP's reducer
waits for its buckets in one) run once per share, when the share is done (every
local run, every RPC it started), as torch's engine runs them when a worker's
graph task completes: a parameter whose gradient comes back over RPC after the
first run (DDP around a forward that leaves this worker) is in by then.

``backward`` returns when every worker the gradients reached is done. A
recv node that no gradient reaches sends nothing and nobody waits for it, so
an RPC result the loss never used cannot hang backward. Each visit runs with
``retain_graph=True`` (a node shared by two incoming gradients must survive
the first); graphs of passes without ``retain_graph`` are freed afterwards
(``DistAutogradContext.begin_pass``/``end_pass``). The first error anywhere
(this worker's part included) fails the pass as tensorplay's "Error on Node RANK: ...",
naming the worker.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import (
    AccumulateGrad,
    GradientEdge,
    as_cotangent,
    defer_final_callbacks,
    leaf_gradient,
    run_backward,
    run_final_callbacks,
)
from tensorplay_jax.autograd.sparse_arrays import is_sparse_array
from tensorplay_jax.distributed.autograd import _context
from tensorplay_jax.distributed.autograd._context import DistAutogradContext, retrieve
from tensorplay_jax.distributed.autograd._serial import serial_for
from tensorplay_jax.rpc import Future, RpcError, RpcPeerError, get_worker_info, rpc_async
from tensorplay_jax.rpc import is_initialized as _rpc_is_initialized
from tensorplay_jax.rpc.functions import async_execution
from tensorplay_jax.rpc.internal import (
    current_caller,
    internal_target,
    not_initialized,
    on_worker_gone,
)
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.ids import CONTEXT_ID, PASS_ID
from tensorplay_jax.runtime.shards import HostShards, is_sharded
from tensorplay_jax.tensors import Tensor

__all__ = [
    "backward",
    "current_accumulator",
    "current_backward_passes",
    "filled_array",
    "run_pass",
    "send_from_recv",
]

Item = list[Any]  # [message key, [one cotangent per sent Tensor]]

_pass_ids = itertools.count(1)
_POLL_S = 0.05  # the backward caller checks its other replies this often while it waits
_tls = threading.local()


@functools.lru_cache(maxsize=256)
def filled_array(value: int, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """A cached constant array (ones for roots, zeros for unused outputs); arrays are immutable."""
    return jnp.full(shape, value, dtype)


class _Run:
    """What one local run collects: gradients for this worker, and where it sent."""

    __slots__ = ("dests", "local", "task")

    def __init__(self, task: _Task) -> None:
        self.task = task
        self.local: list[Item] = []
        self.dests: set[int] = set()


# This worker's shares of backward passes still running (``current_backward_passes``).
_running: set[Future[Any]] = set()


def current_backward_passes() -> int:
    """How many backward passes have a share running on this worker now."""
    return len(_running)


def current_accumulator() -> Callable[[Tensor, jax.Array], None] | None:
    """Where the distributed backward pass running in this thread puts leaf gradients (its
    context's gradients), or None outside one; a leaf's post-accumulate-grad hook reads
    the gradient there (data parallel training under distributed autograd)."""
    run: _Run | None = getattr(_tls, "run", None)
    return None if run is None else run.task.accumulate


def node_error(rank: int, name: str, e: BaseException) -> RuntimeError:
    """tensorplay's error for ``e``, raised in a distributed backward on worker ``rank``:
    "Error on Node RANK: <the message>", naming the worker and the type after it."""
    err = RuntimeError(f"Error on Node {rank}: {e}\n(on worker {name!r}, a {type(e).__name__})")
    err.__cause__ = e
    return err


class _Task:
    """One worker's share of one backward pass: local runs, and the RPCs they started."""

    def __init__(
        self,
        ctx: DistAutogradContext,
        pass_id: int,
        retain: bool,
        reply_to: int | None,
        accumulate: Callable[[Tensor, jax.Array], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.accumulate = accumulate or ctx.accumulate
        self.pass_id = pass_id
        self.retain = retain
        self.reply_to = reply_to
        me = get_worker_info()
        self.me, self.me_name = me.id, me.name
        self.done: Future[list[Item]] = Future()
        _running.add(self.done)  # counted until its share of the pass is over
        self.done.add_done_callback(_running.discard)
        self._serial = serial_for(ctx)
        self._lock = threading.Lock()
        self._pending = 1  # the first local run
        self._reply: list[Item] = []
        self._failed = False
        # ``autograd.queue_callback`` s of this share's local runs: they run once, when the
        # share is done (every run, every RPC it started), before it replies or returns
        self._callbacks: list[Callable[[], None]] = []
        # The worker that called backward handles replies on its own (waiting) thread:
        # one thread hand-off per reply instead of two.
        self._inline: list[Future[list[Item]]] | None = [] if reply_to is None else None

    # ----------------------------------------------------------------- running
    def start(self, roots: Sequence[Any], grads: Sequence[Any]) -> None:
        self._serial.submit(functools.partial(self._guarded, self._run, roots, grads))

    def start_items(self, items: list[Item]) -> None:
        self._serial.submit(functools.partial(self._guarded, self._run_items, items))

    def _guarded(self, run: Callable[..., None], *args: Any) -> None:
        """One queued unit of this task: ``run(*args)``, then one pending count settled."""
        try:
            run(*args)
        except BaseException as e:
            self._fail(e)
        finally:
            self._settle()

    def _run_items(self, items: list[Item]) -> None:
        roots: list[GradientEdge] = []
        grads: list[Any] = []
        for key, gs in items:
            edges = self.ctx.send_edges(key)
            for edge, g in zip(edges, gs, strict=True):
                if edge is None or g is None:
                    continue
                g = _cotangent(g, edge)
                if isinstance(edge.node, AccumulateGrad):  # a leaf was sent: no tape to run
                    leaf = edge.node.variable  # its gradient after its hooks (register_hook)
                    self.accumulate(leaf, leaf_gradient(leaf, as_cotangent(g)))
                else:
                    roots.append(edge)
                    grads.append(g)
        if roots:
            self._run(roots, grads)

    def _run(self, roots: Sequence[Any], grads: Sequence[Any]) -> None:
        while True:
            if self._failed:
                return
            self.ctx.begin_pass(self.pass_id, roots, self.retain)
            run = _Run(self)
            prev = getattr(_tls, "run", None)
            _tls.run = run
            span = trace.begin("dist_autograd: local", "autograd") if trace.RECORDING else None
            try:
                with defer_final_callbacks(self._callbacks):
                    run_backward(roots, grads, retain_graph=True, accumulate=self.accumulate)
            finally:
                _tls.run = prev
                if span is not None:
                    span.end(context_id=self.ctx.context_id, sends=sorted(run.dests))
            roots, grads = [], []
            for key, gs in run.local:
                for edge, g in zip(self.ctx.send_edges(key), gs, strict=True):
                    if edge is not None and g is not None:
                        roots.append(edge)
                        grads.append(_cotangent(g, edge))
            if not roots:
                return

    def emit(self, run: _Run, dest: int, item: Item) -> None:
        """A recv node's gradients: on their way to ``dest`` at once, unless they stay here."""
        run.dests.add(dest)
        if dest == self.me:
            run.local.append(item)
        elif dest == self.reply_to:
            with self._lock:
                self._reply.append(item)
        else:
            self._send(dest, [item])

    def _send(self, dest: int, items: list[Item]) -> None:
        with self._lock:
            self._pending += 1
        try:
            fut = rpc_async(
                dest,
                _apply_gradients,
                args=(self.ctx.context_id, self.pass_id, self.retain, items),
            )
        except BaseException:
            self._settle()
            raise
        if self._inline is not None:
            self._inline.append(fut)
        else:
            fut.add_done_callback(self._on_reply)

    def run_inline(self) -> None:
        """On the worker that called backward: process replies here until the pass is done.

        Runs of this task may go on in another thread (one draining the context's
        queue), so replies keep coming until ``done``, not only while some are known.
        """
        assert self._inline is not None
        futs = self._inline
        while not self.done.done():
            ready = next((f for f in futs if f.done()), None)
            if ready is None:
                # a timeout, or an error handled below, through _on_reply
                with contextlib.suppress(BaseException):
                    (futs[0] if futs else self.done).wait(_POLL_S)
                continue
            futs.remove(ready)
            self._on_reply(ready)

    def _on_reply(self, fut: Future[list[Item]]) -> None:
        try:
            items = fut.wait()
        except BaseException as e:
            self._fail(e)
            self._settle()
            return
        if items:
            self._serial.submit(functools.partial(self._guarded, self._run_items, items))
        else:
            self._settle()

    # ----------------------------------------------------------------- finishing
    def _fail(self, e: BaseException) -> None:
        with self._lock:
            if self._failed:
                return
            self._failed = True
        if not isinstance(e, RpcError) and not str(e).startswith("Error on Node "):
            e = node_error(self.me, self.me_name, e)  # a lost or late worker keeps its type
        self.done._try_set_exception(e)

    def _settle(self) -> None:
        with self._lock:
            self._pending -= 1
            finished = self._pending == 0 and not self._failed
            reply = self._reply
        if not finished:
            return
        if self._callbacks:  # e.g. DDP's reducer, now that every gradient of the share is in
            try:
                run_final_callbacks(self._callbacks)
            except BaseException as e:
                self._fail(e)
                return
        self.done._try_set_result(reply)


def send_from_recv(dest: int, key: int, grads: list[jax.Array | None]) -> None:
    """Called by a recv node's backward: send ``grads`` for the Tensors of message ``key``.

    They leave at once for ``dest``, unless ``dest`` is this worker (run after this
    local pass) or the worker this task replies to (they ride in the reply).
    """
    run: _Run | None = getattr(_tls, "run", None)
    if run is None:
        raise RuntimeError(
            "backward reached a Tensor that arrived over RPC, outside distributed autograd: "
            "call tensorplay_jax.distributed.autograd.backward(context_id, [loss]) instead of "
            "loss.backward() when the graph crosses RPC calls"
        )
    # Host arrays: the codec sends their bytes either way, and the receiver then
    # feeds them to its jitted backward as they are, with no device_put first.
    # A sparse gradient travels as a SparseTensor (indices and values, never densified).
    host = [None if g is None else _on_wire(g) for g in grads]
    run.task.emit(run, dest, [key, host])  # a list: one msgpack level less


def _on_wire(g: Any) -> Any:
    """A gradient as it is sent: a host array, a sparse one as a SparseTensor, a sharded
    one as its host shards (``HostShards``: one buffer each, never gathered)."""
    if is_sparse_array(g):
        return Tensor._wrap(g)
    if isinstance(g, jax.Array) and is_sharded(g):
        return HostShards.of(g)
    return np.asarray(g)


# The sharding each send edge's node puts its gradient on (``_sendrecv``): where
# a sharded gradient (``HostShards``) goes as it arrives.
placing: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _cotangent(g: Any, edge: Any) -> Any:
    """A gradient as it arrived (``_on_wire``) as the tape takes it."""
    if isinstance(g, HostShards):
        return g.on(placing[edge.node])
    return g._value if isinstance(g, Tensor) else g


@internal_target
@async_execution
def _apply_gradients(
    context_id: int, pass_id: int, retain: bool, items: list[Item]
) -> Future[list[Item]]:
    """RPC target: continue a backward pass here from the send edges of ``items``."""
    caller = current_caller()
    try:
        ctx = retrieve(context_id)
        task = _Task(ctx, pass_id, retain, reply_to=None if caller is None else caller.id)
    except BaseException as e:
        me = get_worker_info()
        fut: Future[list[Item]] = Future()
        fut.set_exception(node_error(me.id, me.name, e))
        return fut
    if trace.RECORDING:  # this worker's share of the pass (it may reply before it ends)
        with trace.span("dist_autograd: apply gradients", "autograd", context_id=context_id):
            task.start_items(items)
    else:
        task.start_items(items)
    return task.done


def backward(context_id: int, roots: Tensor | Sequence[Tensor], retain_graph: bool = False) -> None:
    """Run the distributed backward pass of ``context_id`` from scalar ``roots``.

    Every worker whose tape the gradients reach runs its part; this returns
    when all of them are done. Each leaf's gradient accumulates in the context
    on the worker that owns the leaf (read it there with
    :func:`get_gradients`), never in ``Tensor.grad``.

    Args:
        context_id: the id from ``with dist_autograd.context() as context_id``.
        roots: a scalar (one-element) Tensor that requires grad, or a sequence
            of them: ``loss`` or ``[loss]``.
        retain_graph: keep the graph (on every worker) for another backward
            over it; gradients then accumulate across calls.

    Raises:
        RpcNotInitializedError: RPC is not initialized.
        RuntimeError: unknown context ("Could not find autograd context with
            id: N"), empty ``roots``, a root that is not a scalar or needs no
            grad, a second pass over a freed graph, or an error on a worker
            during the pass ("Error on Node RANK: ...", this one's too).
        TypeError: a root is not a Tensor.
        RpcPeerError, RpcTimeoutError: a worker died or did not answer in time.

    Example (one process, issue 4's seed example):
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.distributed.autograd as dist_autograd
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("worker", rank=0, world_size=1)
        >>> def remote_double(t):
        ...     return t * 2
        >>> with dist_autograd.context() as ctx_id:
        ...     t = tp.randn(4, requires_grad=True)
        ...     out = rpc.rpc_sync("worker", remote_double, args=(t,))
        ...     dist_autograd.backward(ctx_id, [out.sum()])
        ...     print(dist_autograd.get_gradients(ctx_id)[t])
        tensor([2., 2., 2., 2.])
        >>> rpc.shutdown()
    """
    if not _rpc_is_initialized():
        raise not_initialized("dist_autograd.backward")
    try:
        context_id = operator.index(context_id)
    except TypeError:
        raise TypeError(
            f"dist_autograd.backward: incompatible function arguments: context_id="
            f"{context_id!r:.60} must be an int (from `with dist_autograd.context() as context_id`)"
        ) from None
    ctx = retrieve(context_id)
    lost = getattr(ctx, "lost_worker", None)
    if lost is not None:
        raise RpcPeerError(f"dist_autograd.backward: context {context_id} is lost: {lost}")
    roots = _check_roots(roots)
    ones = [filled_array(1, r._value.shape, r._value.dtype) for r in roots]
    run_pass(ctx, roots, ones, retain_graph)


def _lose_contexts(info: Any, why: str) -> None:
    """A dynamic group removed ``info``: release the contexts it created (no one else
    will), and mark those it took part in: they cannot run backward."""
    for ctx in list(_context._contexts.values()):
        if CONTEXT_ID.unpack(ctx.context_id)[0] == info.id:
            _context.release(ctx.context_id, skip=info.id)
        elif info.id in ctx.known_worker_ids():
            ctx.lost_worker = why  # type: ignore[attr-defined]


on_worker_gone(_lose_contexts)


def run_pass(
    ctx: DistAutogradContext,
    roots: Sequence[Any],
    grads: Sequence[Any],
    retain_graph: bool,
    accumulate: Callable[[Tensor, jax.Array], None] | None = None,
) -> None:
    """One whole distributed backward pass from ``roots`` (with cotangents ``grads``), here."""
    pass_id = PASS_ID.pack(get_worker_info().id, next(_pass_ids))
    span = trace.begin("dist_autograd.backward", "autograd") if trace.RECORDING else None
    try:
        task = _Task(ctx, pass_id, retain_graph, None, accumulate)
        task.start(roots, grads)
        task.run_inline()
        task.done.wait()
    finally:
        if span is not None:
            span.end(context_id=ctx.context_id, pass_id=pass_id)
    if not retain_graph:
        ctx.end_pass()


def _check_roots(roots: Any) -> list[Tensor]:
    if isinstance(roots, Tensor):
        roots = [roots]  # backward(ctx_id, loss), as the tensorplay docs write it
    elif not isinstance(roots, Iterable):
        raise TypeError(
            f"dist_autograd.backward: incompatible function arguments: roots is a "
            f"{type(roots).__name__}; expected a Tensor or a list of Tensors, e.g. "
            "backward(context_id, loss) or backward(context_id, [loss])"
        )
    roots = list(roots)
    if not roots:
        raise RuntimeError(
            "dist_autograd.backward: No tensors provided for gradient computation (roots is "
            "empty); pass the scalar loss(es), e.g. backward(context_id, [loss])"
        )
    for i, r in enumerate(roots):
        if not isinstance(r, Tensor):
            raise TypeError(
                f"dist_autograd.backward: roots[{i}] is a {type(r).__name__}; expected a Tensor"
            )
        if not r.requires_grad:
            raise RuntimeError(
                f"dist_autograd.backward: roots[{i}] does not require grad: requires_grad not "
                "set on root (no input of its computation has requires_grad=True); nothing to "
                "differentiate"
            )
        if r.value.size != 1:
            raise RuntimeError(
                f"dist_autograd.backward: roots[{i}] has shape {tuple(r.shape)}: it is not a "
                "scalar, all roots need to be scalar (one-element) Tensors; reduce it first, "
                "e.g. loss.sum()"
            )
        if r.grad_fn is None:
            raise RuntimeError(
                f"dist_autograd.backward: roots[{i}] does not have a valid gradient function: "
                "it is a leaf (made by you, not computed), so nothing leads back from it; "
                "start from a value computed from it, e.g. (t * 1).sum()"
            )
    return roots
