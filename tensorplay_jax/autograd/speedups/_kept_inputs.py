"""Pullbacks returned by a compiled program, without the program's own inputs.

A compiled program's outputs are new buffers, so a pullback that keeps one of the
program's inputs (a weight, ``x``) would get a copy of it on every run. Inside the
trace, :meth:`Layout.strip` returns only the pullbacks' other leaves and notes in
the :class:`Layout` which leaf is which input; after the call, :meth:`Layout.restore`
puts the inputs themselves back. Each compiled program owns its layout (one object
made with its ``jax.jit`` function and dropped with it), so a layout exists exactly
while the program's traces do. The segment programs (``_lazy``) and the fused
forward-backward programs (``_fused``, ``_known``) use it.

Example:
    >>> import jax, jax.numpy as jnp
    >>> layout = Layout()
    >>> def body(w, x):
    ...     out, pb = jax.vjp(lambda w: x @ w, w)
    ...     return out, layout.strip(pb, (w, x))
    >>> w, x = jnp.ones((2, 2)), jnp.ones((1, 2))
    >>> out, rest = jax.jit(body)(w, x)
    >>> pb = layout.restore(rest, (w, x))
    >>> pb(jnp.ones((1, 2)))[0].shape
    (2, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

__all__ = ["Layout"]


class Layout:
    """Which leaves of a program's pullbacks are the program's inputs (set when traced)."""

    __slots__ = ("source", "treedef")

    def __init__(self) -> None:
        self.treedef: Any = None
        self.source: tuple[int, ...] = ()  # per leaf: the input it is, or -1

    def strip(self, pbs: Any, inputs: Sequence[Any]) -> list[Any]:
        """Inside the trace: the pullbacks' leaves that are not the program's own inputs."""
        leaves, treedef = jax.tree_util.tree_flatten(pbs)
        position = {id(x): i for i, x in enumerate(inputs)}
        source = tuple(position.get(id(leaf), -1) for leaf in leaves)
        self.treedef, self.source = treedef, source
        return [leaf for leaf, i in zip(leaves, source, strict=True) if i < 0]

    def restore(self, computed: Sequence[Any], inputs: Sequence[Any]) -> Any:
        """The pullbacks :meth:`strip` took apart, with the inputs put back."""
        rest = iter(computed)
        leaves = [inputs[i] if i >= 0 else next(rest) for i in self.source]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)
