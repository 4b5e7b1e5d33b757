"""A node's own hooks (torch's ``Node.register_prehook`` / ``Node.register_hook``) and the
handle that removes a hook.

Its own module so that ``_node`` (whose ``Node`` methods register a hook) and
``_hooks`` (which runs them in the engine's node-by-node pass: what each gets and
may return is described there) both import it, and not each other. A node's hooks
live as long as the node (weak keys).

Example:
    >>> import tensorplay_jax as tp
    >>> y = tp.ones(2, requires_grad=True) * 3
    >>> h = y.grad_fn.register_hook(lambda gi, go: None)
    >>> len(POST[y.grad_fn])
    1
    >>> h.remove()
    >>> len(POST[y.grad_fn])
    0
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["POST", "PRE", "RemovableHandle", "register"]

# node -> {handle id: hook}, in registration order
PRE: weakref.WeakKeyDictionary[Any, dict[int, Callable[..., Any]]] = weakref.WeakKeyDictionary()
POST: weakref.WeakKeyDictionary[Any, dict[int, Callable[..., Any]]] = weakref.WeakKeyDictionary()
_ids = itertools.count()
_lock = threading.Lock()


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` unregisters the hook (torch's handle)."""

    def __init__(self, table: dict[int, Callable[..., Any]], hook_id: int) -> None:
        self._table = table
        self.id = hook_id

    def remove(self) -> None:
        """Unregister the hook (a no-op when already removed)."""
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def register(node: Any, hook: Callable[..., Any], *, pre: bool) -> RemovableHandle:
    """Keep ``hook`` as a pre-hook (``pre``) or post-hook of ``node``.

    Raises:
        TypeError: ``hook`` is not callable.
    """
    kind = "register_prehook" if pre else "register_hook"
    if not callable(hook):
        raise TypeError(f"{kind}: hook must be callable, got {type(hook).__name__}")
    hook_id = next(_ids)
    with _lock:
        table = (PRE if pre else POST).setdefault(node, {})
        table[hook_id] = hook
    return RemovableHandle(table, hook_id)
