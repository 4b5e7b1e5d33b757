"""The tape's one reference upward: the ``Tensor`` class, imported lazily from ``tensors``.

``autograd`` is the lower layer: the tensor library imports it (``call_op``,
grad mode, the node types, ``run_backward``), never the other way round at
import time. The tape still wraps values in Tensors (``call_op``,
``attach_outputs``, ``grad``, ``accumulate_into_grad``) and recognises them,
so this module resolves ``Tensor`` on first use (a module ``__getattr__``,
PEP 562) and keeps it in its globals: later reads of ``_tensor_class.Tensor``
are a plain attribute lookup. This is the only import of ``tensorplay_jax.tensors``
inside ``autograd``.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd import _tensor_class
    >>> _tensor_class.Tensor is tp.Tensor
    True
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "Tensor":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tensorplay_jax.tensors import Tensor

    globals()["Tensor"] = Tensor
    return Tensor
