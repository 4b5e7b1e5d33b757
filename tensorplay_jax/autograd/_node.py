"""Graph nodes of the local tape: ``Node``, JAX-VJP nodes, Python-callable nodes, leaf sinks.

A node stands for one recorded operation. ``node.next_edges[i]`` is the
``GradientEdge`` (producer node, output index) of the operation's i-th
differentiable input, or ``None`` where that input needs no gradient;
``node.apply(grads)`` maps one cotangent per output (``None`` = no gradient
reached that output) to one cotangent per entry of ``next_edges``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax

from tensorplay_jax.autograd import _node_hooks
from tensorplay_jax.autograd._cache import apply_vjp
from tensorplay_jax.autograd._node_hooks import RemovableHandle

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

Grads = tuple[jax.Array | None, ...]

_seq = itertools.count()

_FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved values "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.run_backward(). Specify retain_graph=True if you "
    "need to backward through the graph a second time."
)


class GradientEdge(NamedTuple):
    """Where a gradient goes: output ``output_nr`` of ``node``."""

    node: Node
    output_nr: int


# tensorplay's spellings of the node kinds whose names differ from ours.
_TORCH_NAMES = {
    "AccumulateGrad": "torch::autograd::AccumulateGrad",
    "RecvRpcBackward": "torch::distributed::autograd::RecvRpcBackward",
    "SendRpcBackward": "torch::distributed::autograd::SendRpcBackward",
}


class NodeName(str):
    """A node's name: ours as a string (``node.name``), tensorplay's when called (``name()``).

    tensorplay's ``grad_fn.name()`` is a method giving, for an operation, its
    name with the overload index (``AddBackward0``), and for the engine's own
    nodes their C++ names (``torch::autograd::AccumulateGrad``).

    Example:
      >>> NodeName("AddBackward")()
      'AddBackward0'
      >>> NodeName("AccumulateGrad")()
      'torch::autograd::AccumulateGrad'
    """

    __slots__ = ()

    def __call__(self) -> str:
        own = str(self)
        if own in _TORCH_NAMES:
            return _TORCH_NAMES[own]
        return f"{own}0" if own.endswith("Backward") else own


_NAMES: dict[str, NodeName] = {}  # one NodeName per distinct name (see node_name)
_NAMES_LIMIT = 4096


def node_name(name: str) -> NodeName:
    """The ``NodeName`` of ``name``, one object per distinct name.

    A node's name is one of a few hundred operation names; sharing one object
    per name keeps every node's name out of the cyclic garbage collector's
    view (a ``str`` subclass instance is tracked by it), which a graph of many
    thousand nodes would otherwise add to each full collection. Past
    ``_NAMES_LIMIT`` distinct names a new name gets its own object.
    """
    out = _NAMES.get(name)
    if out is None:
        out = NodeName(name)
        if len(_NAMES) < _NAMES_LIMIT:
            _NAMES[name] = out
    return out


class CustomNodeName(NodeName):
    """A custom ``Function``'s node name (``MyFuncBackward``): the same in both spellings."""

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


class Node:
    """One recorded operation: its backward and the edges to its inputs' producers.

    Subclasses implement ``_apply``. ``seq`` orders nodes by creation (later
    nodes run first when several are ready, as in tensorplay's engine).
    """

    __slots__ = ("__weakref__", "_released", "name", "next_edges", "num_outputs", "seq")

    # A VJPNode whose forward a recording strategy holds back: a handle with ``flush()``
    # and ``aval(node, output_nr)`` (see ``_seams``); None once it ran, or never held.
    lazy: Any = None

    def __init__(
        self, name: str, next_edges: Sequence[GradientEdge | None], num_outputs: int
    ) -> None:
        self.name = node_name(name)
        self.next_edges: tuple[GradientEdge | None, ...] = tuple(next_edges)
        self.num_outputs = num_outputs
        self.seq = next(_seq)
        self._released = False

    def apply(self, grads: Grads) -> Grads:
        """Cotangents of the outputs -> cotangents of the inputs (one per ``next_edges``)."""
        if self._released:
            raise RuntimeError(f"{self.name}: {_FREED_MSG}")
        out = tuple(self._apply(grads))
        if len(out) != len(self.next_edges):
            raise RuntimeError(
                f"{self.name}: backward returned {len(out)} gradients for "
                f"{len(self.next_edges)} inputs"
            )
        return out

    def _apply(self, grads: Grads) -> Sequence[jax.Array | None]:
        raise NotImplementedError

    def release(self) -> None:
        """Free what the backward saved; a later ``apply`` raises (no ``retain_graph``)."""
        self._released = True

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        """torch's view of ``next_edges``: one ``(node, output_nr)`` per input edge,
        ``(None, 0)`` where that input needs no gradient (a leaf's node is its
        ``AccumulateGrad``, whose ``variable`` is the leaf)."""
        return tuple((None, 0) if e is None else (e.node, e.output_nr) for e in self.next_edges)

    def register_prehook(self, fn: Callable[[tuple[Any, ...]], Any]) -> RemovableHandle:
        """Run ``fn(grad_outputs)`` before this node's backward; a returned tuple replaces
        ``grad_outputs`` (torch's ``Node.register_prehook``).

        ``grad_outputs`` holds one Tensor (``None``: no gradient) per output of the
        node, after the hooks of the Tensors they belong to; on an ``AccumulateGrad``
        it is the leaf's gradient before it is accumulated.

        Returns:
            A handle whose ``remove()`` unregisters ``fn``.

        Example:
            >>> import tensorplay_jax as tp
            >>> x = tp.ones(2, requires_grad=True)
            >>> y = x * 3
            >>> h = y.grad_fn.register_prehook(lambda go: (go[0] * 2,))
            >>> y.sum().backward()
            >>> x.grad
            tensor([6., 6.])
        """
        return _node_hooks.register(self, fn, pre=True)

    def register_hook(
        self, fn: Callable[[tuple[Any, ...], tuple[Any, ...]], Any]
    ) -> RemovableHandle:
        """Run ``fn(grad_inputs, grad_outputs)`` after this node's backward; a returned tuple
        replaces ``grad_inputs`` (torch's ``Node.register_hook``).

        ``grad_inputs`` holds one gradient per entry of ``next_functions`` (empty for an
        ``AccumulateGrad``, whose hook runs after the leaf's gradient is accumulated),
        ``grad_outputs`` the gradients the backward received.

        Returns:
            A handle whose ``remove()`` unregisters ``fn``.

        Example:
            >>> import tensorplay_jax as tp
            >>> x = tp.ones(2, requires_grad=True)
            >>> y = x * 3
            >>> seen = []
            >>> acc = y.grad_fn.next_functions[0][0]
            >>> h = acc.register_hook(lambda gi, go: seen.append(go[0].tolist()))
            >>> y.sum().backward()
            >>> seen
            [[3.0, 3.0]]
        """
        return _node_hooks.register(self, fn, pre=False)

    @property
    def released(self) -> bool:
        """Whether ``release`` ran (a backward through this node now raises)."""
        return self._released

    def __repr__(self) -> str:
        return f"<{self.name}>"


_MODIFIED_MSG = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: [{dtype} {shape}], saved by {name}, is at version {now}; expected version "
    "{saved} instead. Clone it before the in-place write (x = x.clone()), or write it after "
    "the backward."
)


class VJPNode(Node):
    """A node whose backward is a cached, jitted JAX VJP (see ``_cache.apply_vjp``).

    ``vjp`` is the ``jax.tree_util.Partial`` returned by ``jax.vjp`` inside the
    jitted forward: it holds the residuals only, and its tree structure is the
    same object on every cache hit, so the backward is compiled once per
    operation, static arguments and input shapes/dtypes.

    ``recipe`` is how the node's backward is recorded when a backward pass runs
    with ``create_graph=True`` (``_higher_order``): ``(entry, mask, rule,
    operands)``, the operation's cache entry, which operands are differentiated,
    ``call_rule``'s bound pullback (None: ``jax.vjp`` of the entry), and the
    operands as the operation got them (arrays and scalars, or Tensors whose value
    has not been written since, which ``check_saved`` makes sure of). None for an
    operation whose backward needs no operand value (``saves=False``: linear in
    the cotangents), whose pullback is then recorded as it is.
    """

    __slots__ = (
        "lazy",
        "lazy_index",
        "lazy_op",
        "origin",
        "out_info",
        "recipe",
        "saved",
        "versions",
        "vjp",
    )

    def __init__(
        self,
        name: str,
        vjp: Any,
        out_info: Any,
        next_edges: Sequence[GradientEdge | None],
        num_outputs: int,
        saved: tuple[Tensor, ...] = (),
    ) -> None:
        super().__init__(name, next_edges, num_outputs)
        self.vjp = vjp
        self.out_info = out_info
        # the input Tensors a write would make stale, and their _version when recorded (a
        # tuple of ints apart: the garbage collector stops tracking it)
        self.saved = saved
        self.versions = tuple(t._version for t in saved)
        self.lazy: Any = None  # the pending handle (``_seams``) while the forward is held back
        # the strategy's own: where the node sits in its pending work, what it runs
        self.lazy_index = 0
        self.lazy_op: Any = None
        self.origin: Any = None  # the program ``vjp`` came from (None: its operation's own)
        self.recipe: Any = None  # (entry, mask, rule, operands) for create_graph, see above

    def check_saved(self) -> None:
        """Raise torch's error if an input this node saved was written in place since."""
        for t, version in zip(self.saved, self.versions, strict=True):
            if t._version != version:
                raise RuntimeError(
                    _MODIFIED_MSG.format(
                        dtype=t.dtype,
                        shape=list(t.shape),
                        name=self.name,
                        now=t._version,
                        saved=version,
                    )
                )

    def keep_operand(self, tensor: Tensor, value: Any) -> None:
        """An in-place write is about to give ``tensor``, an operand of this node, a new
        value: the ``recipe`` keeps ``value``, the one the operation read."""
        recipe = self.recipe
        if recipe is not None:
            entry, mask, rule, operands = recipe
            kept = [value if o is tensor else o for o in operands]
            self.recipe = (entry, mask, rule, kept)

    def _apply(self, grads: Grads) -> Sequence[jax.Array | None]:
        seg = self.lazy
        if seg is not None:
            seg.flush()
        self.check_saved()
        return apply_vjp(self.vjp, grads, self.out_info)

    def release(self) -> None:
        super().release()
        self.vjp = None
        self.saved = self.versions = ()
        self.lazy_op = None
        self.recipe = None


class FunctionNode(Node):
    """A node whose backward is an arbitrary Python callable (RPC send/recv edges, custom rules).

    ``backward(grads)`` receives one cotangent (``jax.Array`` or ``None``) per
    output and returns one per entry of ``next_edges``. With
    ``run_without_grads`` the engine calls it even when no gradient reached any
    output (all ``None``): an RPC recv node can then tell its peer "no
    gradient" instead of leaving it waiting.
    """

    __slots__ = ("_backward", "run_without_grads")

    def __init__(
        self,
        name: str,
        backward: Callable[[Grads], Sequence[jax.Array | None]],
        next_edges: Sequence[GradientEdge | None],
        num_outputs: int,
        *,
        run_without_grads: bool = False,
    ) -> None:
        super().__init__(name, next_edges, num_outputs)
        self._backward: Callable[[Grads], Sequence[jax.Array | None]] | None = backward
        self.run_without_grads = run_without_grads

    def _apply(self, grads: Grads) -> Sequence[jax.Array | None]:
        assert self._backward is not None
        return self._backward(grads)

    def release(self) -> None:
        super().release()
        self._backward = None


class AccumulateGrad(Node):
    """The sink of a leaf Tensor: the engine hands its gradient to the ``accumulate`` callback."""

    __slots__ = ("variable",)

    def __init__(self, variable: Tensor) -> None:
        super().__init__("AccumulateGrad", (), 1)
        self.variable = variable

    def _apply(self, grads: Grads) -> Sequence[jax.Array | None]:
        return ()

    def release(self) -> None:
        # A leaf keeps nothing worth freeing, and may be reached again by a later graph.
        pass
