"""torch's ``autograd.Function``: a custom operation whose backward is a Python static method.

Subclass :class:`Function` with static ``forward(ctx, *args)`` and
``backward(ctx, *grads)`` and call ``MyFunc.apply(*args)``. The call records
ONE node on the tape, a :class:`BackwardCFunction` named ``MyFuncBackward``,
which is also the ``ctx`` both methods get (as in torch, ``y.grad_fn`` is the
ctx): ``save_for_backward`` / ``saved_tensors``, ``needs_input_grad``,
``mark_non_differentiable``, ``set_materialize_grads`` and any attribute the
forward sets.

* ``forward`` runs under ``no_grad`` on the arguments as given; Tensor
  arguments that require grad become the node's edges (``next_functions``, one
  per Tensor argument, in order), other arguments are passed through and get
  ``None`` from ``backward``.
* ``backward`` gets one gradient per forward output (zeros for an output no
  gradient reached, unless ``ctx.set_materialize_grads(False)``; ``None`` for
  a non-Tensor output) and returns one per forward argument. It runs under
  ``no_grad``, except in a backward with ``create_graph=True``, where it runs in
  grad mode on Tensors on the tape, so what it computes is recorded and can be
  differentiated again (``BackwardCFunction.apply_graph``); one decorated with
  :func:`once_differentiable` runs under ``no_grad`` even then, and differentiating
  its result raises torch's error.
* The node is a Python-callable node of the tape, so the engine runs it node
  by node (the fused and known compiled passes, ``_fused``/``_known``, only take
  graphs of JAX-VJP nodes), locally, under ``autograd.grad`` and inside a
  distributed autograd pass alike. Its outputs are never pending (``_lazy``):
  the forward reads its inputs' values, which runs their segment.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd import Function
    >>> class Cube(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x**3
    ...
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return g * 3 * x**2
    >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
    >>> y = Cube.apply(x)
    >>> y.grad_fn.name, y.sum().backward(), x.grad
    ('CubeBackward', None, tensor([ 3., 12.]))
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._grad_mode import is_grad_enabled, no_grad
from tensorplay_jax.autograd._higher_order import not_differentiable
from tensorplay_jax.autograd._lift import apply
from tensorplay_jax.autograd._node import (
    _FREED_MSG,
    _MODIFIED_MSG,
    CustomNodeName,
    Grads,
    Node,
)

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

__all__ = ["BackwardCFunction", "Function", "FunctionCtx", "once_differentiable"]

F = TypeVar("F", bound=Callable[..., Any])


class FunctionCtx:
    """What a Function's ``forward`` and ``backward`` get as ``ctx`` (any attribute may be set)."""

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keep ``tensors`` (or ``None`` s) for ``backward`` (``ctx.saved_tensors``).

        A saved Tensor written in place before the backward makes
        ``saved_tensors`` raise torch's "modified by an inplace operation" error.
        """
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, _tc.Tensor):
                raise TypeError(
                    f"save_for_backward can only save Tensors or None, but argument {i} is a "
                    f"{type(t).__name__}; keep other values as ctx attributes (ctx.k = k)"
                )
        self._saved = tuple((t, None if t is None else t._version) for t in tensors)

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """What ``save_for_backward`` kept.

        Raises:
            RuntimeError: the graph was freed by a backward without
                ``retain_graph``, or a saved Tensor was written in place since.
        """
        saved = self.__dict__.get("_saved", ())
        if saved is None:
            raise RuntimeError(_FREED_MSG)
        for t, version in saved:
            if t is not None and t._version != version:
                raise RuntimeError(
                    _MODIFIED_MSG.format(
                        dtype=t.dtype,
                        shape=list(t.shape),
                        name=getattr(self, "name", "a custom Function"),
                        now=t._version,
                        saved=version,
                    )
                )
        return tuple(t for t, _ in saved)

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        """Mark outputs of ``forward`` that need no gradient (indices, masks).

        They come out with ``requires_grad=False``; ``backward`` still gets a
        (zero) gradient for each.
        """
        self._non_differentiable = self.__dict__.get("_non_differentiable", set()) | {
            id(t) for t in tensors
        }

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (default) or ``None`` for outputs no gradient reached."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Refused: in-place custom Functions are not supported on this tape."""
        raise NotImplementedError(
            "ctx.mark_dirty: custom Functions that modify their inputs in place are not "
            "supported; return a new Tensor from forward instead"
        )


def _sum_to(g: jax.Array, shape: tuple[int, ...], name: str, index: int) -> jax.Array:
    """``g`` summed down to ``shape`` when ``shape`` broadcasts to ``g.shape`` (torch's rule)."""
    gshape = tuple(g.shape)
    try:
        ok = np.broadcast_shapes(shape, gshape) == gshape
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(
            f"Function {name} returned an invalid gradient at index {index} - got "
            f"{list(gshape)} but expected shape compatible with {list(shape)}"
        )
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1
    )
    return jnp.sum(g, axis=axes, keepdims=False).reshape(shape) if axes else g


class BackwardCFunction(FunctionCtx, Node):
    """The tape node of one ``Function.apply`` call, and its ``ctx``.

    ``next_edges`` has one entry per Tensor argument of ``forward`` (``None``
    where it needs no gradient); ``num_outputs`` is the number of forward
    outputs. Its backward is the Function's ``backward`` on Tensors.
    """

    def __init__(self, fn: type[Function], args: Sequence[Any]) -> None:
        tensors = [a for a in args if isinstance(a, _tc.Tensor)]
        edges = [t._gradient_edge() if t.requires_grad else None for t in tensors]
        Node.__init__(self, f"{fn.__name__}Backward", edges, 0)
        self.name = CustomNodeName(self.name)  # tensorplay's name() has no overload index
        self._fn = fn
        self._arg_is_tensor = tuple(isinstance(a, _tc.Tensor) for a in args)
        self._in_avals = tuple((tuple(t._aval().shape), t._aval().dtype) for t in tensors)
        self._out_avals: tuple[tuple[tuple[int, ...], Any] | None, ...] = ()
        self.needs_input_grad = tuple(isinstance(a, _tc.Tensor) and a.requires_grad for a in args)
        self.materialize_grads = True

    def _apply(self, grads: Grads) -> Sequence[jax.Array | None]:
        with no_grad():
            result = self._fn.backward(self, *self._grad_outputs(grads))
        out = self._checked(result)
        return [None if g is None else self._fitted(g._value, k, i) for k, i, g in out]

    def apply_graph(self, grads: Sequence[Tensor | None]) -> tuple[Tensor | None, ...]:
        """The backward with ``create_graph`` (``_higher_order``): ``backward`` runs in grad
        mode on the Tensors, so what it computes is recorded. A backward that recorded
        nothing from cotangents requiring grad (``once_differentiable``) gives gradients
        whose own backward raises torch's error."""
        if self.__dict__.get("_saved", ()) is None:
            raise RuntimeError(_FREED_MSG)
        result = self._fn.backward(self, *self._grad_outputs(grads))
        out = self._checked(result)
        fitted: list[Tensor | None] = []
        for k, i, g in out:
            if g is not None and (tuple(g.shape), g.dtype) != self._in_avals[k]:
                shape, dtype = self._in_avals[k]
                g = apply(_fit, g, shape, dtype, str(self.name), i)  # (on the tape)
            fitted.append(g)
        needing = [g for g in grads if g is not None and g.requires_grad]
        if needing and not any(g is not None and g.requires_grad for g in fitted):
            why = (
                "trying to differentiate twice a function that was marked with "
                f"@once_differentiable ({self.name})"
            )
            return not_differentiable(fitted, needing, why)
        return tuple(fitted)

    def _grad_outputs(self, grads: Sequence[Any]) -> list[Any]:
        """What ``backward`` gets: a Tensor per output (zeros where none came, unless
        ``set_materialize_grads(False)``), ``None`` for a non-Tensor output."""
        wrapped: list[Any] = []
        for g, aval in zip(grads, self._out_avals, strict=True):
            if aval is None:  # a non-Tensor output
                wrapped.append(None)
            elif g is not None:
                wrapped.append(g if isinstance(g, _tc.Tensor) else _tc.Tensor._wrap(g))
            elif self.materialize_grads:
                wrapped.append(_tc.Tensor._wrap(jnp.zeros(*aval)))
            else:
                wrapped.append(None)
        return wrapped

    def _checked(self, result: Any) -> list[tuple[int, int, Tensor | None]]:
        """``backward``'s result checked against the forward's arguments: for each Tensor
        argument, its index among them, its position among all arguments and its
        gradient as a Tensor (None: none, or the argument needs none)."""
        if not isinstance(result, tuple):
            result = (result,)
        n_args = len(self._arg_is_tensor)
        if len(result) < n_args or any(r is not None for r in result[n_args:]):
            raise RuntimeError(
                f"function {self.name} returned an incorrect number of gradients (expected "
                f"{n_args}, got {len(result)})"
            )
        out: list[tuple[int, int, Tensor | None]] = []
        for i, (g, is_tensor) in enumerate(zip(result, self._arg_is_tensor, strict=False)):
            if not is_tensor:
                if g is not None:
                    raise RuntimeError(
                        f"function {self.name} returned a gradient different than None at "
                        f"position {i + 1}, but the corresponding forward input was not a "
                        "Variable"
                    )
                continue
            k = len(out)
            if g is None or self.next_edges[k] is None:
                out.append((k, i, None))
                continue
            if isinstance(g, jax.Array | np.ndarray):
                g = _tc.Tensor._wrap(g)
            elif not isinstance(g, _tc.Tensor):
                raise TypeError(
                    f"function {self.name} returned a {type(g).__name__} as the gradient at "
                    f"position {i + 1}; expected a Tensor or None"
                )
            out.append((k, i, g))
        return out

    def _fitted(self, g: Any, k: int, i: int) -> Any:
        """Gradient ``g`` (an array) of the ``k``-th Tensor argument (argument ``i``) in its
        shape (summed down where it broadcasts, torch's rule) and dtype."""
        shape, dtype = self._in_avals[k]
        if tuple(g.shape) == shape and g.dtype == dtype:
            return g
        return _fit(jnp.asarray(g), shape, dtype, str(self.name), i)

    def release(self) -> None:
        super().release()
        if self.__dict__.get("_saved"):
            self._saved = None  # ``saved_tensors`` now raises torch's "freed" error


def _fit(g: jax.Array, shape: tuple[int, ...], dtype: Any, name: str, index: int) -> jax.Array:
    """``g`` summed down to ``shape`` (see :func:`_sum_to`) and cast to ``dtype``."""
    if tuple(g.shape) != shape:
        g = _sum_to(g, shape, name, index)
    return g.astype(dtype)


def _is_traced(t: Tensor) -> bool:
    return isinstance(t._aval(), jax.core.Tracer)


class Function:
    """Base class of custom differentiable operations (torch's ``autograd.Function``).

    Define ``forward(ctx, *args, **kwargs)`` and ``backward(ctx, *grads)`` as
    static methods and call :meth:`apply`; or define ``forward(*args)`` and
    ``setup_context(ctx, inputs, output)`` (torch 2's split form). See the module
    docstring for what ``ctx`` offers and how the node runs.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please "
            f"use new-style autograd function with static forward method: call "
            f"{type(self).__name__}.apply(...) instead of {type(self).__name__}()(...)"
        )

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """The operation's result (runs under ``no_grad``)."""
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        """With a ctx-less ``forward(*args)``: fill ``ctx`` from the inputs and the output."""
        raise NotImplementedError("setup_context is not overridden")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        """One gradient per ``forward`` argument (``None`` for those that need none)."""
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` and record one node whose backward is ``backward``.

        Returns:
            What ``forward`` returned, its Tensors replaced by outputs of the node
            (float outputs require grad when an input does and grad mode is on).
        """
        ctx = BackwardCFunction(cls, args)
        tensors = [a for a in args if isinstance(a, _tc.Tensor)]
        record = (
            is_grad_enabled()
            and any(t.requires_grad for t in tensors)
            and not any(_is_traced(t) for t in tensors)
        )
        split = cls.setup_context is not Function.setup_context
        with no_grad():
            if split:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if not record:
            return output
        many = isinstance(output, tuple)
        outs = output if many else (output,)
        nondiff = ctx.__dict__.get("_non_differentiable", set())
        ctx.num_outputs = len(outs)
        avals: list[tuple[tuple[int, ...], Any] | None] = []
        result: list[Any] = []
        for i, o in enumerate(outs):
            if not isinstance(o, _tc.Tensor):
                avals.append(None)
                result.append(o)
                continue
            value = o._value
            avals.append((tuple(value.shape), value.dtype))
            if id(o) in nondiff:
                result.append(_tc.Tensor._wrap(value))
            else:
                result.append(_tc.Tensor._wrap_output(value, ctx, i))
        ctx._out_avals = tuple(avals)
        return tuple(result) if many else result[0]


def once_differentiable(fn: F) -> F:
    """Mark a ``backward`` as not differentiable itself: it runs under ``no_grad``.

    In a backward with ``create_graph=True`` the gradients it returns are then on the
    tape through a node that raises torch's "trying to differentiate twice" error
    when they are differentiated, instead of a silent zero.
    """

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with no_grad():
            return fn(ctx, *args)

    return wrapper  # type: ignore[return-value]
