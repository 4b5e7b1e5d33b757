"""Tensor gradient hooks (``Tensor.register_hook``): a function of a Tensor's gradient.

A hook on a **leaf** is kept on the Tensor and runs on the leaf's summed
gradient before it is accumulated (into ``.grad``, a distributed autograd
context, or ``autograd.grad``'s result). A hook on a **non-leaf** is kept with
its producer node (output ``output_nr``) and runs on that output's summed
gradient before the node's backward. Hooks run in registration order; each
gets the gradient as a Tensor and may return a replacement of the same shape
(``None`` keeps it).

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

import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._node import AccumulateGrad, Node

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

Hook = Callable[["Tensor"], Any]

_LEAF_ATTR = "_grad_hooks"  # a leaf's hooks: a dict (handle id -> hook) in its __dict__
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


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` unregisters the hook (torch's handle)."""

    def __init__(self, table: dict[int, Hook], hook_id: int) -> None:
        self._table = table
        self.id = hook_id

    def remove(self) -> None:
        """Unregister the hook (a no-op when already removed)."""
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


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
    global _live_leaves
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
            table = tensor.__dict__.get(_LEAF_ATTR)
            if table is None:
                table = tensor.__dict__[_LEAF_ATTR] = {}
                _live_leaves += 1
                weakref.finalize(tensor, _leaf_died)
        else:
            per_node = _node_hooks.setdefault(node, {})
            table = per_node.setdefault(tensor.output_nr, {})
        table[hook_id] = hook
    return RemovableHandle(table, hook_id)


def active() -> bool:
    """Whether any hook may be registered (the engine then checks ``reaches``)."""
    return _live_leaves > 0 or len(_node_hooks) > 0


def _hooked(node: Node) -> bool:
    if isinstance(node, AccumulateGrad):
        return bool(node.variable.__dict__.get(_LEAF_ATTR))
    per_node = _node_hooks.get(node)
    return per_node is not None and any(per_node.values())


def reaches(nodes: Iterable[Node]) -> bool:
    """Whether any of ``nodes`` (a backward's reachable nodes) has a hook."""
    return any(_hooked(n) for n in nodes)


def _run(hooks: Iterable[Hook], grad: Any) -> Any:
    wrapped = _tc.Tensor._wrap(grad)
    for hook in list(hooks):
        out = hook(wrapped)
        if out is None:
            continue
        if not isinstance(out, _tc.Tensor):
            out = _tc.Tensor(out)
        if tuple(out.shape) != tuple(wrapped.shape):
            name = getattr(hook, "__name__", type(hook).__name__)
            raise RuntimeError(
                f"hook '{name}' has changed the size of value: got {tuple(out.shape)}, "
                f"expected {tuple(wrapped.shape)}; a hook must return a gradient of the "
                "Tensor's shape (or None)"
            )
        wrapped = out
    return wrapped._value


def leaf_gradient(leaf: Tensor, grad: Any) -> Any:
    """``grad`` after ``leaf``'s hooks (unchanged when it has none)."""
    table = leaf.__dict__.get(_LEAF_ATTR)
    if not table or grad is None:
        return grad
    return _run(table.values(), grad)


def before_node(node: Node, grads: list[Any]) -> list[Any]:
    """The gradients of ``node``'s outputs after the hooks of the Tensors they belong to."""
    if isinstance(node, AccumulateGrad):
        return [leaf_gradient(node.variable, grads[0])]
    per_node = _node_hooks.get(node)
    if not per_node:
        return grads
    out = list(grads)
    for nr, table in per_node.items():
        if table and out[nr] is not None:
            out[nr] = _run(table.values(), out[nr])
    return out
