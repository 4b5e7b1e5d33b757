"""Pullbacks returned by a compiled program, without the program's own inputs.

A compiled program's outputs are new buffers, so a pullback that keeps one of the
program's inputs (a weight, ``x``) would get a copy of it on every run. Inside the
trace, :func:`strip_inputs` returns only the pullbacks' other leaves and remembers,
under the program's key, which leaf is which input; after the call,
:func:`with_inputs` puts the inputs themselves back. The segment programs
(``_lazy``) and the fused forward-backward programs (``_fused``, ``_known``) use it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import jax

__all__ = ["strip_inputs", "with_inputs"]

# program key -> (the pullbacks' treedef, per leaf the segment input it is, or -1),
# set when the program is traced
_pullback_leaves: dict[Hashable, tuple[Any, tuple[int, ...]]] = {}


def strip_inputs(key: Hashable, pbs: Any, inputs: Sequence[Any]) -> list[Any]:
    """Inside a trace: the pullbacks' leaves that are not the program's own inputs."""
    leaves, treedef = jax.tree_util.tree_flatten(pbs)
    position = {id(x): i for i, x in enumerate(inputs)}
    source = tuple(position.get(id(leaf), -1) for leaf in leaves)
    _pullback_leaves[key] = (treedef, source)
    return [leaf for leaf, i in zip(leaves, source, strict=True) if i < 0]


def with_inputs(key: Hashable, computed: Sequence[Any], inputs: Sequence[Any]) -> Any:
    """The pullbacks ``strip_inputs`` took apart under ``key``, with the inputs put back."""
    treedef, source = _pullback_leaves[key]
    rest = iter(computed)
    leaves = [inputs[i] if i >= 0 else next(rest) for i in source]
    return jax.tree_util.tree_unflatten(treedef, leaves)
