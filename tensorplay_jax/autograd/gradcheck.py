"""torch's ``gradcheck`` and ``gradgradcheck``: the tape's gradients against finite differences.

``gradcheck(func, inputs)`` compares, for every output of ``func`` and every input
that requires grad, the Jacobian the tape computes (one backward pass per output
element, ``autograd.grad`` with a one-hot cotangent) with the Jacobian of central
finite differences (``func`` run twice per input element, at ``x + eps`` and
``x - eps``, under ``no_grad``). ``gradgradcheck`` does the same for the gradient
itself: it checks ``grad_outputs -> autograd.grad(func(inputs), inputs,
grad_outputs, create_graph=True)`` with ``gradcheck``, so a custom ``Function``'s
double backward, or any operation's second derivative, is checked the same way.
They are what a port of torch code that tests its gradients with
``torch.autograd.gradcheck`` calls.

Finite differences need float64 (JAX's 64-bit mode, ``JAX_ENABLE_X64=1``), as in
torch; a float32 input gets torch's warning, and then ``eps``, ``atol`` and ``rtol``
should be widened (``eps=1e-3, atol=1e-3, rtol=1e-2``).

Example:
    >>> import warnings
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.autograd import gradcheck
    >>> x = tp.tensor([0.5, -1.0, 2.0], requires_grad=True)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # float32 (torch warns: not double precision)
    ...     gradcheck(tp.sin, (x,), eps=1e-3, atol=1e-3, rtol=1e-2)
    True
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._grad import grad

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

# No ``__all__``: ``tensorplay_jax.autograd.gradcheck`` is the function, as torch's
# ``torch.autograd.gradcheck`` is, so this module's three names are documented where
# ``tensorplay_jax.autograd`` exports them; ``from tensorplay_jax.autograd.gradcheck
# import GradcheckError`` works as torch's import does.


# Two backward passes over one graph may differ by rounding: the CPU backend runs a small
# operation with NumPy until its shape recurs, then by its compiled program (``_host_eval``).
_ROUNDING = 4  # units in the last place of each gradient entry


class GradcheckError(RuntimeError):
    """A Jacobian of the tape differs from the finite differences (torch's ``GradcheckError``)."""


def _tupled(x: Any) -> tuple[Any, ...]:
    return (x,) if isinstance(x, _tc.Tensor) else tuple(x)


def _is_float(t: Any) -> bool:
    return isinstance(t, _tc.Tensor) and np.issubdtype(np.dtype(t.dtype), np.inexact)


def _refuse(flag: bool, name: str) -> None:
    if flag:
        raise NotImplementedError(
            f"gradcheck: {name}=True is not supported: the tape has reverse mode only "
            "(for forward mode and batched checks use jax.test_util.check_grads on a JAX "
            "function, through tp.apply)"
        )


def gradcheck(
    func: Callable[..., Any],
    inputs: Tensor | Sequence[Any],
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Check the tape's gradients of ``func`` at ``inputs`` against finite differences.

    Args:
        func: takes ``inputs`` and returns a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of arguments; the Tensors that require grad are
            checked, the others (and non-Tensors) are passed as they are.
        eps: the finite difference step.
        atol: absolute tolerance (``|analytical - numerical| <= atol + rtol * |numerical|``).
        rtol: relative tolerance.
        raise_exception: raise :class:`GradcheckError` on a mismatch (else return False).
        nondet_tol: how far two backward passes on the same input may differ, beyond
            4 units in the last place of each entry (the CPU backend may run an operation
            with NumPy the first time and by its compiled program later).
        check_undefined_grad: kept for torch code: each output's row is computed with no
            gradient for the other outputs, which is what it checks.
        check_grad_dtypes: each gradient must have its input's dtype.
        check_batched_grad: not supported (raises).
        check_batched_forward_grad: not supported (raises).
        check_forward_ad: not supported (raises).
        check_backward_ad: False checks nothing (as torch with only forward mode asked).
        fast_mode: accepted; the full Jacobians are compared (what torch's slow mode does).
        masked: not supported for True (sparse inputs; raises).

    Returns:
        True when every Jacobian matches (False instead of raising, with
        ``raise_exception=False``).

    Raises:
        GradcheckError: a Jacobian differs (torch's "Jacobian mismatch for output o with
            respect to input i" with both matrices), backward is not reentrant, or a
            gradient has the wrong dtype.
        ValueError: no input requires grad.
    """
    for flag, name in (
        (check_batched_grad, "check_batched_grad"),
        (check_batched_forward_grad, "check_batched_forward_grad"),
        (check_forward_ad, "check_forward_ad"),
        (bool(masked), "masked"),
    ):
        _refuse(flag, name)
    args = _tupled(inputs)
    wanted = [i for i, a in enumerate(args) if isinstance(a, _tc.Tensor) and a.requires_grad]
    if not wanted:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but none of "
            "them have requires_grad=True."
        )
    for i in wanted:
        if np.dtype(args[i].dtype) not in (np.float64, np.complex128):
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point "
                "or complex. This check will likely fail if all the inputs are not of double "
                "precision floating point or complex. ",
                UserWarning,
                stacklevel=2,
            )
    if not check_backward_ad:
        return True
    try:
        _check(func, args, wanted, eps, atol, rtol, nondet_tol, check_grad_dtypes)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def _check(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    wanted: list[int],
    eps: float,
    atol: float,
    rtol: float,
    nondet_tol: float,
    check_grad_dtypes: bool,
) -> None:
    outputs = _tupled(func(*args))
    numerical = _numerical(func, args, wanted, outputs, eps)
    analytical = _analytical(outputs, [args[i] for i in wanted], check_grad_dtypes)
    again = _analytical(outputs, [args[i] for i in wanted], False)
    for o, rows in enumerate(analytical):
        for k, i in enumerate(wanted):
            a, n = rows[k], numerical[o][k]
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n"
                )
            if np.any(np.abs(a - again[o][k]) > nondet_tol + _ROUNDING * np.spacing(np.abs(a))):
                raise GradcheckError(
                    "Backward is not reentrant, i.e., running backward with same input and "
                    "grad_output multiple times gives different values, although analytical "
                    "gradient matches numerical gradient. The tolerance for nondeterminism "
                    f"was {nondet_tol}."
                )


def _host(t: Any) -> np.ndarray:
    return np.array(t.detach().numpy() if isinstance(t, _tc.Tensor) else t)


def _numerical(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    wanted: list[int],
    outputs: tuple[Any, ...],
    eps: float,
) -> list[list[np.ndarray]]:
    """``[output][input]`` Jacobians (output elements x input elements) of central
    differences; a non-float output's (an index, a count) is all zeros."""
    sizes = [int(np.size(_host(o))) for o in outputs]
    out: list[list[np.ndarray]] = [[] for _ in outputs]
    for i in wanted:
        base = _host(args[i])
        cols = [np.zeros((s, base.size), np.result_type(base.dtype, np.float32)) for s in sizes]
        for j in range(base.size):
            ends = []
            for step in (eps, -eps):
                moved = base.copy()
                moved.flat[j] += step
                # (in grad mode, the input requiring grad: ``func`` may differentiate)
                tensor = _tc.Tensor(moved.astype(base.dtype), requires_grad=True)
                results = _tupled(func(*args[:i], tensor, *args[i + 1 :]))
                ends.append([_host(r).astype(cols[0].dtype).ravel() for r in results])
            for o, (hi, lo) in enumerate(zip(*ends, strict=True)):
                if _is_float(outputs[o]):
                    cols[o][:, j] = (hi - lo) / (2 * eps)
        for o in range(len(outputs)):
            out[o].append(cols[o])
    return out


def _analytical(
    outputs: tuple[Any, ...], inputs: list[Tensor], check_grad_dtypes: bool
) -> list[list[np.ndarray]]:
    """``[output][input]`` Jacobians of the tape: row ``k`` is the gradient of output
    element ``k`` (one backward with a one-hot cotangent, the graph kept)."""
    out: list[list[np.ndarray]] = []
    for o in outputs:
        size = int(np.size(_host(o)))
        mats = [np.zeros((size, int(np.size(_host(t)))), np.dtype(t.dtype)) for t in inputs]
        if _is_float(o) and o.requires_grad:
            for k in range(size):
                onehot = np.zeros(size, np.dtype(o.dtype))
                onehot[k] = 1
                cot = _tc.Tensor(onehot.reshape(tuple(o.shape)))
                grads = grad(o, inputs, cot, retain_graph=True, allow_unused=True)
                for m, (g, t) in enumerate(zip(grads, inputs, strict=True)):
                    if g is None:
                        continue
                    if check_grad_dtypes and g.dtype != t.dtype:
                        raise GradcheckError("Gradient has dtype mismatch")
                    mats[m][k] = _host(g).ravel()
        out.append(mats)
    return out


def gradgradcheck(
    func: Callable[..., Any],
    inputs: Tensor | Sequence[Any],
    grad_outputs: Tensor | Sequence[Tensor] | None = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """Check the second derivatives of ``func``: ``gradcheck`` of its gradient, recorded
    with ``create_graph=True``, as a function of ``inputs`` and ``grad_outputs``.

    Args:
        func: as for :func:`gradcheck`.
        inputs: as for :func:`gradcheck`.
        grad_outputs: cotangents of ``func``'s float outputs (default: random values in
            ``[-1, 1)`` of each output's shape and dtype, requiring grad).
        eps: as for :func:`gradcheck`.
        atol: as for :func:`gradcheck`.
        rtol: as for :func:`gradcheck`.
        raise_exception: as for :func:`gradcheck`.
        nondet_tol: as for :func:`gradcheck`.
        check_undefined_grad: as for :func:`gradcheck`.
        check_grad_dtypes: as for :func:`gradcheck`.
        fast_mode: as for :func:`gradcheck`.
        gen_non_contig_grad_outputs: accepted (every array here is contiguous).
        check_batched_grad: not supported (raises).
        check_fwd_over_rev: not supported (raises).
        check_rev_over_rev: False checks nothing.
        masked: not supported for True (raises).

    Returns:
        True when every Jacobian of the gradient matches.

    Example:
        >>> import warnings
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd import gradgradcheck
        >>> x = tp.tensor([0.5, -1.0], requires_grad=True)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # float32 (torch warns: not double precision)
        ...     gradgradcheck(lambda t: t**3, (x,), eps=1e-3, atol=1e-2, rtol=1e-2)
        True
    """
    _refuse(check_fwd_over_rev, "check_fwd_over_rev")
    if not check_rev_over_rev:
        return True
    args = _tupled(inputs)
    wanted = [i for i, a in enumerate(args) if isinstance(a, _tc.Tensor) and a.requires_grad]
    outputs = [o for o in _tupled(func(*args)) if _is_float(o) and o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(
            _tc.Tensor(
                rng.uniform(-1, 1, tuple(o.shape)).astype(np.dtype(o.dtype)), requires_grad=True
            )
            for o in outputs
        )
    cots = _tupled(grad_outputs)
    n = len(args)

    def gradient(*both: Any) -> tuple[Any, ...]:
        xs, gs = both[:n], both[n:]
        outs = [o for o in _tupled(func(*xs)) if _is_float(o) and o.requires_grad]
        got = grad(outs, [xs[i] for i in wanted], list(gs), create_graph=True, allow_unused=True)
        return tuple(g for g in got if g is not None)

    return gradcheck(
        gradient,
        (*args, *cots),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
        masked=masked,
    )
