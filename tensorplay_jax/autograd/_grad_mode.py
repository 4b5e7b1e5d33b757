"""Thread-local gradient recording mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``inference_mode``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether operations on this thread currently record graph nodes.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.is_grad_enabled()
        True
        >>> with tp.no_grad():
        ...     tp.is_grad_enabled()
        False
    """
    return getattr(_state, "enabled", True)


def _set(mode: bool) -> None:
    _state.enabled = mode


class set_grad_enabled:
    """Context manager (and decorator) that sets gradient recording on this thread.

    Like ``torch.set_grad_enabled``: calling it sets the mode at once; used in a
    ``with`` block it restores the previous mode on exit.

    Args:
        mode: ``True`` to record, ``False`` not to.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(2, requires_grad=True)
        >>> with tp.set_grad_enabled(False):
        ...     (x * 2).requires_grad
        False
    """

    def __init__(self, mode: bool) -> None:
        self._prev = is_grad_enabled()
        self._mode = bool(mode)
        _set(self._mode)

    def __enter__(self) -> None:
        _set(self._mode)

    def __exit__(self, *exc: object) -> None:
        _set(self._prev)

    def __call__(self, fn: F) -> F:
        mode = self._mode
        _set(self._prev)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class _GradModeContext:
    """Base of ``no_grad``/``enable_grad``: a context manager and a decorator."""

    _mode: bool = True

    def __enter__(self) -> None:
        self._prev = is_grad_enabled()
        _set(self._mode)

    def __exit__(self, *exc: object) -> None:
        _set(self._prev)

    def __call__(self, fn: F) -> F:
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = is_grad_enabled()
            _set(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _set(prev)

        return wrapper  # type: ignore[return-value]


class no_grad(_GradModeContext):
    """Context manager (and decorator) under which no operation records a graph node.

    Results computed inside do not require grad, whatever their inputs.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(3, requires_grad=True)
        >>> with tp.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
    """

    _mode = False


class enable_grad(_GradModeContext):
    """Context manager (and decorator) that turns recording back on inside ``no_grad``.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(3, requires_grad=True)
        >>> with tp.no_grad(), tp.enable_grad():
        ...     (x * 2).requires_grad
        True
    """

    _mode = True


class inference_mode:
    """torch's ``inference_mode``: no operation records a graph node inside it, as under
    ``no_grad`` (``mode=False``: recording is left as it is). A context manager and a
    decorator, with or without the call (``@tp.inference_mode`` and
    ``@tp.inference_mode()``).

    Tensors made inside are ordinary Tensors that do not require grad: unlike torch's
    inference tensors, they may later take part in recorded operations.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(2, requires_grad=True)
        >>> with tp.inference_mode():
        ...     (x * 2).requires_grad
        False
    """

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):  # the bare decorator: @tp.inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        self._on = bool(mode)
        self._prev: list[bool] = []

    def __enter__(self) -> None:
        self._prev.append(is_grad_enabled())
        if self._on:
            _set(False)

    def __exit__(self, *exc: object) -> None:
        _set(self._prev.pop())

    def __call__(self, fn: F) -> F:
        on = self._on

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(on):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
