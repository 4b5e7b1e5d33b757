"""Gradient hooks: on a Tensor's gradient (``Tensor.register_hook``) and on a node's backward.

A hook on a **leaf** is kept on the Tensor and runs on the leaf's summed
gradient before it is accumulated (into ``.grad``, a distributed autograd
context, or ``autograd.grad``'s result). A hook on a **non-leaf** is kept with
its producer node (output ``output_nr``) and runs on that output's summed
gradient before the node's backward. Hooks run in registration order; each
gets the gradient as a Tensor and may return a replacement of the same shape
(``None`` keeps it).

A **post-accumulate-grad hook** (``Tensor.register_post_accumulate_grad_hook``,
leaves only) runs with the leaf itself right after the backward pass has
accumulated the leaf's gradient (into ``.grad``, or the ``accumulate`` a
distributed autograd context passes); it returns nothing. Data parallel
training hooks here to launch a bucket's all-reduce as soon as its last
gradient is in. ``queue_callback(fn)``, called from a hook during a backward
pass, runs ``fn()`` once when that pass has run every node (torch's
``Variable._execution_engine.queue_callback``).

A **node hook** is torch's ``Node.register_prehook(fn)`` / ``Node.register_hook(fn)``
(``grad_fn.register_hook``, or on a leaf's ``AccumulateGrad`` from
``next_functions``; kept in ``_node_hooks``). A pre-hook gets the node's output
gradients as a tuple (after the Tensor hooks of those outputs) and may return a
tuple that replaces them; a post-hook gets ``(grad_inputs, grad_outputs)`` after
the node's backward ran and may return a tuple that replaces ``grad_inputs``. An
``AccumulateGrad`` node's pre-hook sees the leaf's gradient before it is
accumulated, its post-hook ``((), (grad,))`` after (and after the leaf's
post-accumulate-grad hooks). A node's hooks run when its backward runs: not for a
node no gradient reached, and not for the leaves whose gradients
``autograd.grad`` captures (``run_backward(..., capture=True)``, as in torch).

While any hook is registered the engine runs backward node by node
(``active``/``reaches``): the compiled fused and known backward passes
(``_fused``, ``_known``) never call Python between nodes, so they are skipped
for a graph that reaches a hooked node or leaf.

Example:
    >>> import tensorplay_jax as tp
    >>> x = tp.ones(2, requires_grad=True)
    >>> handle = x.register_hook(lambda g: g * 2)
    >>> (x * 3).sum().backward()
    >>> x.grad
    tensor([6., 6.])
    >>> handle.remove()
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._node import AccumulateGrad, Node
from tensorplay_jax.autograd._node_hooks import POST, PRE, RemovableHandle

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

Hook = Callable[["Tensor"], Any]

_LEAF_ATTR = "_grad_hooks"  # a leaf's hooks: a dict (handle id -> hook) in its __dict__
_POST_ATTR = "_post_accumulate_grad_hooks"  # the same, for post-accumulate-grad hooks
_node_hooks: weakref.WeakKeyDictionary[Node, dict[int, dict[int, Hook]]] = (
    weakref.WeakKeyDictionary()
)
_ids = itertools.count()
_lock = threading.RLock()  # re-entrant: a finalizer may run during a collection inside it
_live_leaves = 0  # leaves holding a hook dict (decremented when the leaf dies)


def _leaf_died() -> None:
    global _live_leaves
    with _lock:
        _live_leaves -= 1


def register_hook(tensor: Tensor, hook: Hook) -> RemovableHandle:
    """Register ``hook(grad) -> Tensor | None`` on ``tensor``'s gradient.

    Args:
        tensor: a Tensor that requires grad (a leaf or a recorded result).
        hook: called with the gradient as a Tensor; a returned Tensor (or
            array) of the same shape replaces it, ``None`` keeps it.

    Returns:
        A handle whose ``remove()`` unregisters the hook.

    Raises:
        RuntimeError: ``tensor`` does not require grad.
        TypeError: ``hook`` is not callable.
    """
    if not callable(hook):
        raise TypeError(
            f"register_hook: hook must be callable (a function of the gradient), got "
            f"{type(hook).__name__}"
        )
    if not tensor.requires_grad:
        raise RuntimeError(
            "cannot register a hook on a tensor that doesn't require gradient; set "
            "requires_grad=True on the leaf first"
        )
    hook_id = next(_ids)
    node = tensor.grad_fn
    with _lock:
        if node is None:
            table = _leaf_table(tensor, _LEAF_ATTR)
        else:
            per_node = _node_hooks.setdefault(node, {})
            table = per_node.setdefault(tensor.output_nr, {})
        table[hook_id] = hook
    return RemovableHandle(table, hook_id)


def _leaf_table(leaf: Tensor, attr: str) -> dict[int, Hook]:
    """``leaf``'s hook table ``attr``, made (and counted live) on first use; under ``_lock``."""
    global _live_leaves
    table = leaf.__dict__.get(attr)
    if table is None:
        table = leaf.__dict__[attr] = {}
        _live_leaves += 1
        weakref.finalize(leaf, _leaf_died)
    return table


def register_post_accumulate_grad_hook(
    tensor: Tensor, hook: Callable[[Tensor], None]
) -> RemovableHandle:
    """Register ``hook(tensor)`` to run after a backward pass accumulates ``tensor``'s gradient.

    Args:
        tensor: a leaf Tensor that requires grad.
        hook: called with ``tensor`` itself once per backward pass that reached it,
            after its gradient was accumulated; its return value is ignored.

    Returns:
        A handle whose ``remove()`` unregisters the hook.

    Raises:
        RuntimeError: ``tensor`` is not a leaf, or does not require grad.
        TypeError: ``hook`` is not callable.

    Example:
        >>> import tensorplay_jax as tp
        >>> w = tp.ones(2, requires_grad=True)
        >>> seen = []
        >>> h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
        >>> (w * 3).sum().backward()
        >>> seen
        [[3.0, 3.0]]
    """
    if not callable(hook):
        raise TypeError(
            "register_post_accumulate_grad_hook: hook must be callable (a function of the "
            f"Tensor), got {type(hook).__name__}"
        )
    if not tensor.requires_grad:
        raise RuntimeError(
            "cannot register a hook on a tensor that doesn't require gradient; set "
            "requires_grad=True on the leaf first"
        )
    if tensor.grad_fn is not None:
        raise RuntimeError(
            "post accumulate grad hooks cannot be registered on non-leaf tensors; register "
            "it on the leaf the gradient accumulates into, or use register_hook"
        )
    hook_id = next(_ids)
    with _lock:
        table = _leaf_table(tensor, _POST_ATTR)
        table[hook_id] = hook
    return RemovableHandle(table, hook_id)


def after_accumulate(leaf: Tensor) -> None:
    """Run ``leaf``'s post-accumulate-grad hooks (the engine calls this after accumulating)."""
    table = leaf.__dict__.get(_POST_ATTR)
    if table:
        for hook in list(table.values()):
            hook(leaf)


# .queue: the running backward pass's final callbacks; .defer_to: where a pass hands them
# when several passes make one backward (``defer_final_callbacks``)
_callbacks = threading.local()


def queue_callback(callback: Callable[[], None]) -> None:
    """Run ``callback()`` once when the backward pass now running in this thread ends.

    Called from a hook during a backward pass (torch's
    ``Variable._execution_engine.queue_callback``); callbacks run in the order queued,
    after every node of the pass, in the thread that ran it, and are not run when the
    pass fails. A callback may queue another, which runs in the same pass.

    Raises:
        RuntimeError: no backward pass with hooks is running in this thread.
    """
    queue = getattr(_callbacks, "queue", None)
    if queue is None:
        raise RuntimeError(
            "Final callbacks can only be installed during backward pass: call "
            "queue_callback from a gradient hook while backward runs"
        )
    queue.append(callback)


class final_callbacks:  # lowercase: used like a function, ``with final_callbacks(on):``
    """Around a backward pass's node loop: collect its ``queue_callback`` s (when ``on``, a
    pass with hooks) and run them in order on a clean exit (one may queue more); the
    queue of a pass it runs inside is restored either way."""

    __slots__ = ("_on", "_prev")

    def __init__(self, on: bool) -> None:
        self._on = on

    def __enter__(self) -> None:
        if self._on:
            self._prev = getattr(_callbacks, "queue", None)
            _callbacks.queue = []

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if not self._on:
            return
        queue = _callbacks.queue
        deferred = getattr(_callbacks, "defer_to", None)
        try:
            if exc_type is not None:
                return
            if deferred is not None:  # this pass is one of several: they run after the last
                deferred.extend(queue)
                return
            _drain(queue)
        finally:
            _callbacks.queue = self._prev


def _drain(queue: list[Callable[[], None]]) -> None:
    """Run ``queue``'s callbacks in order, including those they append to it."""
    i = 0
    while i < len(queue):
        queue[i]()
        i += 1


@contextlib.contextmanager
def defer_final_callbacks(into: list[Callable[[], None]]) -> Iterator[None]:
    """Around one of several backward passes that make one backward (a distributed
    backward's share on one worker: its first pass, and one per gradient that comes
    back): the callbacks the pass queues go into ``into``, for
    :func:`run_final_callbacks` after the last pass, as torch's distributed engine runs
    them once the whole share is done (DDP's reducer then sees every gradient)."""
    prev = getattr(_callbacks, "defer_to", None)
    _callbacks.defer_to = into
    try:
        yield
    finally:
        _callbacks.defer_to = prev


def run_final_callbacks(queue: list[Callable[[], None]]) -> None:
    """Run the deferred ``queue`` in order; a callback may queue another, which runs too."""
    prev, prev_deferred = getattr(_callbacks, "queue", None), getattr(_callbacks, "defer_to", None)
    _callbacks.queue, _callbacks.defer_to = queue, None
    try:
        _drain(queue)
    finally:
        _callbacks.queue, _callbacks.defer_to = prev, prev_deferred


def active() -> bool:
    """Whether any hook may be registered (the engine then checks ``reaches``)."""
    return _live_leaves > 0 or len(_node_hooks) > 0 or len(PRE) > 0 or len(POST) > 0


def _hooked(node: Node) -> bool:
    if PRE.get(node) or POST.get(node):
        return True
    if isinstance(node, AccumulateGrad):
        d = node.variable.__dict__
        return bool(d.get(_LEAF_ATTR)) or bool(d.get(_POST_ATTR))
    per_node = _node_hooks.get(node)
    return per_node is not None and any(per_node.values())


def reaches(nodes: Iterable[Node]) -> bool:
    """Whether any of ``nodes`` (a backward's reachable nodes) has a hook."""
    return any(_hooked(n) for n in nodes)


def _run(hooks: Iterable[Hook], grad: Any) -> Any:
    """``grad`` through ``hooks``: an array back for an array, a Tensor for a Tensor (a
    backward with ``create_graph``, whose gradients are Tensors on the tape)."""
    graph = isinstance(grad, _tc.Tensor)
    wrapped = grad if graph else _tc.Tensor._wrap(grad)
    for hook in list(hooks):
        out = hook(wrapped)
        if out is None:
            continue
        if not isinstance(out, _tc.Tensor):
            out = _tc.Tensor(out)
        _check_size(hook, out, wrapped)
        wrapped = out
    return wrapped if graph else wrapped._value


def leaf_gradient(leaf: Tensor, grad: Any) -> Any:
    """``grad`` after ``leaf``'s hooks (unchanged when it has none)."""
    table = leaf.__dict__.get(_LEAF_ATTR)
    if not table or grad is None:
        return grad
    return _run(table.values(), grad)


def before_node(
    node: Node, grads: list[Any], capture: bool = False, graph: bool = False
) -> list[Any]:
    """The gradients of ``node``'s outputs after the hooks of the Tensors they belong to,
    then after the node's pre-hooks (none run for a leaf with ``capture``: its gradient
    is captured by ``autograd.grad``, not accumulated). ``graph``: the gradients are
    Tensors (``create_graph``), and stay Tensors."""
    if isinstance(node, AccumulateGrad):
        out = [leaf_gradient(node.variable, grads[0])]
        if capture:
            return out
    else:
        out = list(grads)
        for nr, table in (_node_hooks.get(node) or {}).items():
            if table and out[nr] is not None:
                out[nr] = _run(table.values(), out[nr])
    pre = PRE.get(node)
    for hook in list(pre.values()) if pre else ():
        got = hook(_wrapped(out))
        if got is not None:
            out = _replacement(hook, got, out, graph)
    return out


def after_node(
    node: Node, grad_inputs: Sequence[Any], grad_outputs: Sequence[Any], graph: bool = False
) -> Any:
    """``node``'s backward result ``grad_inputs`` after the node's post-hooks, each called
    as ``hook(grad_inputs, grad_outputs)`` (Tensors; ``None`` where no gradient).
    ``graph``: as for :func:`before_node`."""
    post = POST.get(node)
    if not post:
        return grad_inputs
    outputs = _wrapped(grad_outputs)
    out = list(grad_inputs)
    for hook in list(post.values()):
        got = hook(_wrapped(out), outputs)
        if got is not None:
            out = _replacement(hook, got, out, graph)
    return out


def _check_size(hook: Callable[..., Any], new: Any, was: Any) -> None:
    """torch's error when a hook's gradient ``new`` is not of the shape of ``was``."""
    if tuple(new.shape) != tuple(was.shape):
        name = getattr(hook, "__name__", type(hook).__name__)
        raise RuntimeError(
            f"hook '{name}' has changed the size of value: got {tuple(new.shape)}, expected "
            f"{tuple(was.shape)}; a hook must return a gradient of that shape (or None)"
        )


def _wrapped(grads: Sequence[Any]) -> tuple[Tensor | None, ...]:
    return tuple(
        None if g is None else g if isinstance(g, _tc.Tensor) else _tc.Tensor._wrap(g)
        for g in grads
    )


def _replacement(
    hook: Callable[..., Any], got: Any, old: Sequence[Any], graph: bool = False
) -> list[Any]:
    """A node hook's returned tuple as arrays (as Tensors with ``graph``), checked against
    the values it replaces."""
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(got, tuple):
        raise TypeError(
            f"expected tuple, but hook returned '{type(got).__name__}': a node hook returns "
            "None or a tuple with one gradient (or None) per value it was given"
        )
    if len(got) != len(old):
        raise RuntimeError(
            f"hook '{name}' has returned an incorrect number of values (got {len(got)}, but "
            f"expected {len(old)})"
        )
    out = []
    for new, was in zip(got, old, strict=True):
        if new is not None:
            new = new if isinstance(new, _tc.Tensor) else _tc.Tensor(new)
            if was is not None:
                _check_size(hook, new, was)
            if not graph:
                new = new._value
        out.append(new)
    return out
