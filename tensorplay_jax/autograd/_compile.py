"""``tp.compile``: torch.compile's signature; eager Tensor code comes back unchanged.

Every tensorplay operation already runs as a compiled, cached XLA program (see
``_cache``), and a function of Tensors mutates state and records on the tape,
which ``jax.jit`` cannot trace exactly. So ``tp.compile(fn)`` returns ``fn``
itself: the same results and gradients as ``fn``, never a silent difference.
``backend="jax"`` asks for ``jax.jit(fn)``, which is exact for a pure function of
``jax.Array`` s (not of Tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(
    model: Callable[..., Any] | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable[..., Any] = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Accept ``torch.compile``'s call; return ``model`` (``jax.jit(model)`` for backend "jax").

    Works as ``tp.compile(fn)``, ``@tp.compile`` and ``@tp.compile(mode=...)``.
    ``fullgraph``, ``dynamic``, ``options`` and ``disable`` are accepted and have no
    effect; ``mode`` must be one of torch's modes.

    Args:
        model: the function, bound method (``opt.step``) or module to "compile".
        fullgraph: accepted (torch: fail on graph breaks).
        dynamic: accepted (torch: dynamic shapes).
        backend: torch's backend name (ignored), or ``"jax"`` for ``jax.jit(model)``
            when ``model`` is a pure function of ``jax.Array`` s.
        mode: ``None``, ``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` or
            ``"max-autotune-no-cudagraphs"``.
        options: accepted (torch: backend options).
        disable: accepted (torch: return ``model`` unchanged).

    Returns:
        ``model`` itself; ``jax.jit(model)`` for ``backend="jax"``; a decorator
        when ``model`` is omitted.

    Raises:
        ValueError: ``mode`` is not one of torch's modes, or both ``mode`` and
            ``options`` are given (as torch).

    Example:
        >>> import tensorplay_jax as tp
        >>> def step(x):
        ...     return (x * 2).sum()
        >>> tp.compile(step) is step
        True
        >>> tp.compile(mode="reduce-overhead")(step)(tp.ones(3))
        tensor(6.)
    """
    if mode not in _MODES:
        raise ValueError(f"tp.compile: unknown mode {mode!r}; expected one of {_MODES}")
    if mode is not None and options is not None:
        raise RuntimeError("tp.compile: either mode or options can be specified, not both")

    def wrap(fn: Callable[..., Any]) -> Any:
        if backend == "jax" and not disable:
            return jax.jit(fn)
        return fn

    return wrap if model is None else wrap(model)
