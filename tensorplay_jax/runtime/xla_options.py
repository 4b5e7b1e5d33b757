"""The XLA compiler options of tensorplay_jax's own programs, and the ``jit`` that applies them.

The eager tape compiles many small programs (one per operation, pullback,
segment and shape), and a first step, a notebook cell or a short script spends
most of its time compiling them. XLA's CPU compiler in jaxlib 0.10 emits each
fusion through its MLIR fusion emitters, which take longer than its older loop
emitter to compile the programs a training step is made of (convolutions with
batch norm, matmuls with activations, LSTM cells, softmax losses), for code that
runs no faster. Not every program: a long chain of transcendental functions with
reductions in between compiles faster with the fusion emitters
(``docs/benchmarks.md``, "The ported tutorials", has the measurements). So on
the jaxlib versions that still offer the choice, our programs are compiled
with ``xla_cpu_use_fusion_emitters=False``; later versions, which removed the
option, get XLA's defaults. The option is for XLA's CPU compiler, so it is given
only in a process whose default backend is the CPU (decided at the first call of
any of our programs, when JAX's backends are up).

Only programs that tensorplay_jax builds use these options: a user's own
``jax.jit`` is compiled as JAX would, and our functions called inside a user's
trace (``jax.jit`` refuses ``compiler_options`` on a nested jit) run as a plain
``jax.jit``, compiled as part of the user's program with its options.
``TENSORPLAY_JAX_XLA_DEFAULTS=1`` turns them off (every program gets XLA's
defaults).

Example:
    >>> import jax.numpy as jnp
    >>> from tensorplay_jax.runtime import xla_options
    >>> double = xla_options.jit(lambda x: x * 2)
    >>> double(jnp.arange(3)).tolist()
    [0, 2, 4]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jaxlib.version

try:  # whether no trace is active: JAX has no public equivalent
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # a JAX without it: our programs get XLA's defaults
    _trace_state_clean = None

from tensorplay_jax.runtime import settings

# jaxlib 0.10.2's XLA has this option and 0.12's refuses it ("No such compile option");
# 0.11 could not be checked here, so it gets XLA's defaults.
_FUSION_EMITTERS_OPTION_BEFORE = (0, 11)


def compiler_options() -> dict[str, Any]:
    """The options ``jit`` passes to XLA for this process's jaxlib (empty: XLA's defaults)."""
    if settings.get_flag(settings.XLA_DEFAULTS_ENV) or _trace_state_clean is None:
        return {}
    if tuple(jaxlib.version.__version_info__[:2]) < _FUSION_EMITTERS_OPTION_BEFORE:
        return {"xla_cpu_use_fusion_emitters": False}
    return {}


_OPTIONS = compiler_options()
_on_cpu: bool | None = None  # whether the default backend is the CPU (set at first use)


def _default_backend_is_cpu() -> bool:
    global _on_cpu
    _on_cpu = jax.default_backend() == "cpu"
    return _on_cpu


def jit(fun: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """``jax.jit(fun, **kwargs)``, compiled with :func:`compiler_options` when called outside
    any trace.

    Args:
        fun: the function to compile, as for ``jax.jit``.
        **kwargs: ``jax.jit``'s keyword arguments (``static_argnums``, ...).

    Returns:
        ``jax.jit``'s own object when there are no options to pass; otherwise a function
        that calls the jit with options at the top level on a CPU-backed process and a
        plain jit inside a trace (or on another backend), with the former's ``eval_shape``.
    """
    plain = jax.jit(fun, **kwargs)
    if not _OPTIONS:
        return plain
    top = jax.jit(fun, compiler_options=_OPTIONS, **kwargs)
    clean = _trace_state_clean

    @functools.wraps(fun)
    def program(*args: Any, **kw: Any) -> Any:
        if clean() and (_on_cpu if _on_cpu is not None else _default_backend_is_cpu()):
            return top(*args, **kw)
        return plain(*args, **kw)

    program.eval_shape = top.eval_shape  # type: ignore[attr-defined]
    return program
