"""Values given to a leaf without recording, left pending until the leaf is read.

``nn.functional.batch_norm`` in training updates its running statistics from the
batch's: an unrecorded write of a value that the deferred tape (``_lazy``) has not
computed yet. Running the segment there would cut a model's forward at every
BatchNorm; instead the leaf holds the pending Tensor and takes its value on first
read (``Tensor.__getattr__`` for a missing ``_value``, or ``_lazy.materialize``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

# id of a Tensor given another's pending value by ``assign`` -> (a weak reference to
# it, that other Tensor: holding it keeps it live, so every way its segment runs
# hands it a value). Keyed by id: Tensor equality is elementwise.
_assigned: dict[int, tuple[weakref.ref[Tensor], Tensor]] = {}


def _forget(ref: weakref.ref[Tensor], key: int, table: dict[int, Any] = _assigned) -> None:
    # ``table`` bound at definition: this may run while the interpreter shuts down
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        del table[key]


def assign(dst: Tensor, src: Tensor) -> None:
    """Give leaf ``dst`` the value of ``src`` without recording and without running it.

    A pending ``src`` stays pending: ``dst``'s value is taken when it is first read
    (which runs ``src``'s segment if it has not run). ``nn.functional.batch_norm``
    writes its running statistics this way, so a BatchNorm does not cut the
    forward's segment in two. A later write to ``dst`` wins, as a direct one would.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd import _assign, _lazy
        >>> w, stat = tp.ones(2, requires_grad=True), tp.zeros(2)
        >>> y = w * 3
        >>> _assign.assign(stat, y)
        >>> _lazy.is_pending(y)
        True
        >>> stat
        tensor([3., 3.])
    """
    key = id(dst)
    node = src._grad_fn
    if node is None or node.lazy is None:  # not pending: take the value now
        _assigned.pop(key, None)
        dst._value = src._value
        return
    _assigned[key] = (weakref.ref(dst, functools.partial(_forget, key=key)), src)
    with contextlib.suppress(AttributeError):  # else an earlier assign not read yet
        del dst._value


def take_assigned(dst: Tensor) -> bool:
    """Give ``dst`` the value ``assign`` left pending (runs its segment if needed).

    Returns:
        Whether ``dst`` had such a value to take.
    """
    entry = _assigned.get(id(dst))
    if entry is None or entry[0]() is not dst:
        return False
    del _assigned[id(dst)]
    dst._value = entry[1]._value
    return True
