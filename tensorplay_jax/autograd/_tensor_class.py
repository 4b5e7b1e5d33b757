"""The ``Tensor`` class as the tape knows it: registered by the tensor library above.

``autograd`` is the lower layer: the tensor library (``tensorplay_jax.tensors``)
imports it (``call_op``, grad mode, the node types, ``run_backward``), never the
other way round. The tape still wraps values in Tensors (``call_op``,
``attach_outputs``, ``grad``, ``accumulate_into_grad``) and recognises them, so
the tensor library hands its class down once, when it is imported, through
:func:`set_tensor_class` (dependency inversion: no import of ``tensors`` here).
Later reads of ``_tensor_class.Tensor`` are a plain attribute lookup.
``import tensorplay_jax`` (which any of our imports runs first) imports the
tensor library, so the class is set before any operation runs.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd import _tensor_class
    >>> _tensor_class.Tensor is tp.Tensor
    True
"""

from __future__ import annotations

from typing import Any

Tensor: Any = None  # the class, once tensorplay_jax.tensors has set it


def set_tensor_class(cls: type) -> None:
    """Tell the tape which class wraps its values (called by ``tensorplay_jax.tensors``)."""
    global Tensor
    Tensor = cls
