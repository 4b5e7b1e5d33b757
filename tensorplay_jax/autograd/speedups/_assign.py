"""Values given to a leaf without recording, left pending until the leaf is read.

``nn.functional.batch_norm`` in training updates its running statistics from the
batch's: an unrecorded write of a value that the deferred tape (``_lazy``) has not
computed yet. Running the segment there would cut a model's forward at every
BatchNorm; instead the leaf holds the pending Tensor and takes its value on first
read (``Tensor.__getattr__`` for a missing ``_value``: ``autograd.materialize``).
The table of such leaves is the layer's (``STATE.assigned``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd.speedups._state import STATE

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

# STATE.assigned: id of a Tensor given another's pending value by ``assign`` -> (a weak
# reference to it, that other Tensor: holding it keeps it live, so every way its
# segment runs hands it a value). Keyed by id, with the weak reference checked on
# every read (an id is reused only after its Tensor died, whose callback removed it).


def _forget(ref: weakref.ref[Tensor], key: int, table: dict[int, Any]) -> None:
    # ``table`` bound when assigned: this may run while the interpreter shuts down
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
        >>> w, stat = tp.ones(2, requires_grad=True), tp.zeros(2)
        >>> y = w * 3
        >>> assign(stat, y)
        >>> tp.autograd.is_pending(y)
        True
        >>> stat
        tensor([3., 3.])
    """
    key = id(dst)
    table = STATE.assigned
    node = src._grad_fn
    if node is None or node.lazy is None:  # not pending: take the value now
        table.pop(key, None)
        dst._value = src._value
        return
    table[key] = (weakref.ref(dst, functools.partial(_forget, key=key, table=table)), src)
    with contextlib.suppress(AttributeError):  # else an earlier assign not read yet
        del dst._value


def take_assigned(dst: Tensor) -> bool:
    """Give ``dst`` the value ``assign`` left pending (runs its segment if needed).

    Returns:
        Whether ``dst`` had such a value to take.
    """
    table = STATE.assigned
    entry = table.get(id(dst))
    if entry is None or entry[0]() is not dst:
        return False
    del table[id(dst)]
    dst._value = entry[1]._value
    return True
