"""torch's ``autograd.functional``: Jacobians, Hessians and their products, from the tape.

Each function takes a Python function of Tensors and the point to differentiate at,
as torch's does, and computes with ``autograd.grad``: ``vjp`` is one backward pass,
``jvp`` and ``hvp`` two (the double-backward trick: a backward with
``create_graph=True`` through a cotangent that requires grad, then differentiated
with respect to that cotangent), ``jacobian`` one backward per output element and
``hessian`` the Jacobian of the gradient. The inputs are copied off the caller's
graph first (with ``create_graph``, they stay on it), so nothing is accumulated
into any ``.grad``. An input the outputs do not depend on gets zeros (``strict=True``
raises instead, naming it). Results are cut from the graph unless
``create_graph=True``.

For a pure JAX function, ``jax.jacrev``, ``jax.hessian`` and ``jax.jvp`` do the same
in one compiled program; these are for code written against the tape.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd.functional import hessian, jacobian
    >>> x = tp.tensor([1.0, 2.0])
    >>> jacobian(lambda t: t**2, x)
    tensor([[2., 0.],
            [0., 4.]])
    >>> hessian(lambda t: (t**3).sum(), x)
    tensor([[ 6.,  0.],
            [ 0., 12.]])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._grad import grad as _grad
from tensorplay_jax.autograd._grad_mode import enable_grad
from tensorplay_jax.autograd._lift import apply

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]

Inputs = Any  # a Tensor or a tuple of Tensors


def _as_tuple(x: Any, what: str, fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    """``(was_tuple, the Tensors)``; torch's TypeError for anything else (a list too)."""
    many = isinstance(x, tuple)
    items = x if many else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, _tc.Tensor):
            where = f"the value at index {i}" if many else f"the given {what}"
            raise TypeError(
                f"The {what} given to {fn} must be either a Tensor or a tuple of Tensors but "
                f"{where} has type {type(t)}."
            )
    return many, items


def _prepared(inputs: tuple[Tensor, ...], create_graph: bool) -> tuple[Tensor, ...]:
    """Inputs that require grad, copied off the caller's graph (kept on it with
    ``create_graph`` when they were on one: the result is then differentiable)."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t * 1)
        else:
            out.append(_tc.Tensor(t.detach()._value, requires_grad=True))
    return tuple(out)


def _finished(
    values: Sequence[Tensor | None], like: Sequence[Tensor], create_graph: bool
) -> tuple[Tensor, ...]:
    """Zeros where nothing came; cut from the graph unless ``create_graph``."""
    out = []
    for v, t in zip(values, like, strict=True):
        if v is None:
            v = _tc.Tensor._wrap(jnp.zeros(t.shape, t.dtype))
        out.append(v if create_graph else v.detach())
    return tuple(out)


def _strict_check(got: Sequence[Tensor | None], fn: str, strict: bool) -> None:
    if strict:
        for i, g in enumerate(got):
            if g is None:
                raise RuntimeError(
                    f"The output of the user-provided function is independent of input {i}. "
                    f"This is not allowed in strict mode ({fn})."
                )


def _outputs(
    func: Callable[..., Any], inputs: tuple[Tensor, ...], fn: str
) -> tuple[bool, tuple[Tensor, ...]]:
    with enable_grad():
        out = func(*inputs)
    return _as_tuple(out, "outputs of the user-provided function", fn)


def _back(many: bool, items: Sequence[Any]) -> Any:
    return tuple(items) if many else items[0]


def vjp(
    func: Callable[..., Any],
    inputs: Inputs,
    v: Inputs = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    Args:
        func: a function of Tensors returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of Tensors.
        v: one cotangent per output (None: a single one-element output, ones).
        create_graph: keep both results on the tape (differentiable).
        strict: raise if an input does not reach the outputs (else: zeros).

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd.functional import vjp
        >>> vjp(lambda t: t * 3, tp.ones(2), tp.tensor([1.0, 2.0]))[1]
        tensor([3., 6.])
    """
    many_in, ins = _as_tuple(inputs, "inputs", "vjp")
    ins = _prepared(ins, create_graph)
    many_out, outs = _outputs(func, ins, "vjp")
    if v is None:
        if len(outs) != 1 or outs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the user-provided function returns a single "
                "Tensor with a single element."
            )
        cots: tuple[Any, ...] = (None,)
    else:
        cots = _as_tuple(v, "v", "vjp")[1]
    got = _grad(outs, ins, list(cots), create_graph=create_graph, allow_unused=True)
    _strict_check(got, "vjp", strict)
    outs_done = tuple(o if create_graph else o.detach() for o in outs)
    return _back(many_out, outs_done), _back(many_in, _finished(got, ins, create_graph))


def jvp(
    func: Callable[..., Any],
    inputs: Inputs,
    v: Inputs = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), J v)``: the Jacobian-vector product, by two backward passes.

    Args:
        func: a function of Tensors returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of Tensors.
        v: one tangent per input (None: a single one-element input, ones).
        create_graph: keep both results on the tape.
        strict: raise if an output does not depend on the inputs.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd.functional import jvp
        >>> jvp(lambda t: t**2, tp.tensor([1.0, 2.0]), tp.tensor([1.0, 1.0]))[1]
        tensor([2., 4.])
    """
    _, ins = _as_tuple(inputs, "inputs", "jvp")
    ins = _prepared(ins, create_graph)
    tangents = _tangents(ins, v, "jvp")
    many_out, outs = _outputs(func, ins, "jvp")
    got = _along(outs, ins, tangents, create_graph)
    _strict_check(got, "jvp", strict)
    outs_done = tuple(o if create_graph else o.detach() for o in outs)
    return _back(many_out, outs_done), _back(many_out, _finished(got, outs, create_graph))


def _tangents(ins: tuple[Tensor, ...], v: Inputs, fn: str) -> tuple[Tensor, ...]:
    """``v`` as one tangent per input; ones for a single one-element input without it."""
    if v is not None:
        return _as_tuple(v, "v", fn)[1]
    if len(ins) != 1 or ins[0].numel() != 1:
        raise RuntimeError(
            "The vector v can only be None if the input to the user-provided function is a "
            "single Tensor with a single element."
        )
    return (_tc.Tensor._wrap(jnp.ones(ins[0].shape, ins[0].dtype)),)


def _along(
    outs: Sequence[Tensor], ins: Sequence[Tensor], tangents: Sequence[Tensor], create_graph: bool
) -> tuple[Tensor | None, ...]:
    """``J v`` (one per output, None where no input reaches it) for ``J = d outs / d ins``
    by the double-backward trick: ``u -> J^T u`` recorded (``create_graph``) with a
    cotangent ``u`` that requires grad, then differentiated with respect to ``u`` along
    ``v``."""
    dummies = [_tc.Tensor(jnp.zeros(o.shape, o.dtype), requires_grad=True) for o in outs]
    back = _grad(list(outs), list(ins), dummies, create_graph=True, allow_unused=True)
    used = [(b, t) for b, t in zip(back, tangents, strict=True) if b is not None]
    if not used:
        return (None,) * len(outs)
    return _grad(
        [b for b, _ in used],
        dummies,
        [t for _, t in used],
        create_graph=create_graph,
        allow_unused=True,
    )


def _stack_rows(rows: list[Tensor], shape: tuple[int, ...]) -> Tensor:
    return apply(_stack_reshape, rows, shape)


def _stack_reshape(rows: list[Any], shape: tuple[int, ...]) -> Any:
    return jnp.stack(rows).reshape(shape)


def jacobian(
    func: Callable[..., Any],
    inputs: Inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """The Jacobian of ``func`` at ``inputs``: for output ``i`` and input ``j`` a Tensor of
    shape ``outputs[i].shape + inputs[j].shape``.

    Returns a Tensor for one input and one output, a tuple over inputs for one output, a
    tuple over outputs (of Tensors, or of tuples over inputs) otherwise, as torch does.

    Args:
        func: a function of Tensors returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of Tensors.
        create_graph: keep the Jacobian on the tape.
        strict: raise if an input does not reach an output.
        vectorize: accepted; every row is one backward pass either way.
        strategy: ``"reverse-mode"``, or ``"forward-mode"`` (with ``vectorize=True``,
            as torch requires); both give the same values here.
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more '
            'performant. Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
            "implemented for `vectorize=True`."
        )
    many_in, ins = _as_tuple(inputs, "inputs", "jacobian")
    ins = _prepared(ins, create_graph)
    many_out, outs = _outputs(func, ins, "jacobian")
    result: list[tuple[Tensor, ...]] = []
    for i, out in enumerate(outs):
        flat = out.reshape(-1)
        rows: list[list[Tensor]] = [[] for _ in ins]
        for k in range(flat.numel()):
            got = _grad(
                flat[k], ins, retain_graph=True, create_graph=create_graph, allow_unused=True
            )
            if strict:
                for j, g in enumerate(got):
                    if g is None:
                        raise RuntimeError(
                            f"Output {i} of the user-provided function is independent of input "
                            f"{j}. This is not allowed in strict mode."
                        )
            for j, g in enumerate(_finished(got, ins, create_graph)):
                rows[j].append(g)
        per_input = tuple(
            _stack_rows(r, (*out.shape, *t.shape))
            if r
            else _tc.Tensor._wrap(jnp.zeros((*out.shape, *t.shape), t.dtype))
            for r, t in zip(rows, ins, strict=True)
        )
        if not create_graph:
            per_input = tuple(p.detach() for p in per_input)
        result.append(per_input)
    return _back(many_out, [_back(many_in, r) for r in result])


def hessian(
    func: Callable[..., Any],
    inputs: Inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """The Hessian of ``func`` (one output with one element) at ``inputs``: the Jacobian
    of its gradient. For one input a Tensor of shape ``inputs.shape * 2``; for a tuple
    of inputs a tuple of tuples (block ``[i][j]`` of shape ``inputs[i].shape +
    inputs[j].shape``).

    Args:
        func: a function of Tensors returning one Tensor with a single element.
        inputs: a Tensor or a tuple of Tensors.
        create_graph: keep the Hessian on the tape.
        strict: raise if an input does not reach the output.
        vectorize: accepted (see :func:`jacobian`).
        outer_jacobian_strategy: as ``jacobian``'s ``strategy``.
    """
    many_in, ins = _as_tuple(inputs, "inputs", "hessian")

    def single(*args: Tensor) -> Tensor:
        _, outs = _as_tuple(func(*args), "outputs of the user-provided function", "hessian")
        if len(outs) != 1 or outs[0].numel() != 1:
            raise RuntimeError(
                "The function given to hessian should return a single Tensor with a single "
                f"element, but it returned {len(outs)} Tensor(s) of "
                f"{[tuple(o.shape) for o in outs]}"
            )
        return outs[0].reshape(())

    def gradient(*args: Tensor) -> Any:
        return jacobian(single, args if many_in else args[0], create_graph=True, strict=strict)

    return jacobian(
        gradient,
        ins if many_in else ins[0],
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )


def vhp(
    func: Callable[..., Any],
    inputs: Inputs,
    v: Inputs = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), v^T H)``: a vector times the Hessian of a one-element ``func``.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd.functional import vhp
        >>> vhp(lambda t: (t**3).sum(), tp.tensor([1.0, 2.0]), tp.tensor([1.0, 1.0]))[1]
        tensor([ 6., 12.])
    """
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(
    func: Callable[..., Any],
    inputs: Inputs,
    v: Inputs = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), H v)``: the Hessian of a one-element ``func`` times a vector (the
    same as :func:`vhp` where the Hessian is symmetric, computed by two more backward
    passes, as torch's)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(
    func: Callable[..., Any], inputs: Inputs, v: Inputs, create_graph: bool, strict: bool, fn: str
) -> tuple[Any, Any]:
    many_in, ins = _as_tuple(inputs, "inputs", fn)
    ins = _prepared(ins, create_graph)
    _, outs = _outputs(func, ins, fn)
    if len(outs) != 1 or outs[0].numel() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {fn} should contain a single element"
        )
    vs = _tangents(ins, v, fn)
    jac = _grad(outs[0].reshape(()), ins, create_graph=True, allow_unused=True)
    _strict_check(jac, fn, strict)
    present = [(j, w) for j, w in zip(jac, vs, strict=True) if j is not None]
    got: tuple[Tensor | None, ...] = (None,) * len(ins)
    if present and fn == "vhp":  # v^T H: the gradient's backward along v
        got = _grad(
            [j for j, _ in present],
            ins,
            [w for _, w in present],
            create_graph=create_graph,
            allow_unused=True,
        )
    elif present:  # H v: the gradient's Jacobian along v
        part = iter(_along([j for j, _ in present], ins, vs, create_graph))
        got = tuple(next(part) if j is not None else None for j in jac)
    _strict_check(got, fn, strict)
    out = outs[0] if create_graph else outs[0].detach()
    return out, _back(many_in, _finished(got, ins, create_graph))
