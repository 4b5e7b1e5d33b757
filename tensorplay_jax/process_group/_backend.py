"""Backend names and which of them run here: ``Backend``, ``is_available`` and the checks.

``Backend("GLOO")`` is the string ``"gloo"``, as tensorplay's: scripts compare
``dist.get_backend()`` with ``dist.Backend.GLOO`` or pass ``Backend(name)`` on. The
backends that run here are ``gloo`` (CPU collectives) and ``nccl`` (a JAX GPU plugin);
``mpi`` and ``ucc`` are names only.

Example:
  >>> Backend("GLOO") == Backend.GLOO == "gloo"
  True
  >>> is_backend_available("gloo"), is_backend_available("mpi")
  (True, False)
"""

from __future__ import annotations

from typing import Any, ClassVar

from tensorplay_jax.process_group import _startup

__all__ = [
    "Backend",
    "get_default_backend_for_device",
    "is_available",
    "is_backend_available",
    "is_gloo_available",
    "is_mpi_available",
    "is_nccl_available",
    "is_ucc_available",
]


class Backend(str):
    """A backend's name, lower case: ``Backend(name)`` returns the string itself.

    The class attributes name tensorplay's backends; ``default_device_backend_map``
    is the backend each device kind uses by default and ``backend_capability`` the
    device kinds each backend can run on.

    Example:
      >>> Backend("NCCL"), Backend("my_backend")
      ('nccl', 'my_backend')
      >>> Backend(3)
      Traceback (most recent call last):
      ...
      ValueError: Backend constructor parameter must be string-ish
    """

    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    XCCL = "xccl"
    UCC = "ucc"
    MPI = "mpi"
    backend_list: ClassVar[list[str]] = [UNDEFINED, GLOO, NCCL, XCCL, UCC, MPI]
    default_device_backend_map: ClassVar[dict[str, str]] = {"cpu": GLOO, "cuda": NCCL}
    backend_capability: ClassVar[dict[str, list[str]]] = {
        GLOO: ["cpu", "cuda"],
        NCCL: ["cuda"],
        XCCL: ["xpu"],
        UCC: ["cpu", "cuda"],
        MPI: ["cpu", "cuda"],
    }

    def __new__(cls, name: Any) -> str:  # type: ignore[misc]
        if not isinstance(name, str):
            raise ValueError("Backend constructor parameter must be string-ish")
        known = getattr(Backend, name.upper(), None)
        return known if isinstance(known, str) and known != cls.UNDEFINED else name.lower()

    @classmethod
    def register_backend(
        cls, name: str, func: Any, extended_api: bool = False, devices: Any = None
    ) -> None:
        """Not here: tensorplay's plug-in backends are C++ process groups. A new way to move
        a group's data is an engine: ``tensorplay_jax.process_group.engine.register_engine``."""
        raise NotImplementedError(
            f"Backend.register_backend({name!r}): backends here are 'gloo' and 'nccl'; to add a "
            "way to move a group's data, register an engine with "
            "tensorplay_jax.process_group.engine.register_engine and pass "
            "init_process_group(engine=...)"
        )


def is_available() -> bool:
    """Whether process groups are available: always True here.

    Example:
      >>> is_available()
      True
    """
    return True


def is_gloo_available() -> bool:
    """Whether the ``gloo`` backend is available: always True here (CPU collectives).

    Example:
      >>> is_gloo_available()
      True
    """
    return True


def is_nccl_available() -> bool:
    """Whether the ``nccl`` backend is available: a JAX GPU plugin (CUDA or ROCm) is installed.

    Example:
      >>> is_nccl_available() in (True, False)
      True
    """
    return _startup.gpu_plugin_installed()


def is_mpi_available() -> bool:
    """Whether an ``mpi`` backend is available: never here (``init_process_group`` takes
    ``gloo`` and ``nccl``).

    Example:
      >>> is_mpi_available()
      False
    """
    return False


def is_ucc_available() -> bool:
    """Whether a ``ucc`` backend is available: never here.

    Example:
      >>> is_ucc_available()
      False
    """
    return False


def is_backend_available(backend: str) -> bool:
    """Whether ``init_process_group(backend)`` can run here (any case; ``"cpu:gloo,cuda:nccl"``
    when every backend it names can).

    Example:
      >>> is_backend_available("gloo"), is_backend_available("GLOO"), is_backend_available("mpi")
      (True, True, False)
    """
    names = [part.rpartition(":")[2] for part in str(backend).lower().split(",")]
    checks = {"gloo": is_gloo_available, "nccl": is_nccl_available}
    return all(name in checks and checks[name]() for name in names)


_DEVICE_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "gpu": "nccl"}


def get_default_backend_for_device(device: Any) -> str:
    """The backend a group for ``device`` uses by default: ``"gloo"`` for a CPU,
    ``"nccl"`` for a GPU (``"cuda"``, a ``jax.Device`` of platform ``"gpu"``).

    Args:
      device: a device type (``"cpu"``, ``"cuda"``, ``"cuda:0"``), or a device object
        (a ``jax.Device``; anything with ``platform`` or ``type``).

    Raises:
      ValueError: no backend here runs on that device (a TPU: use its ``jax.Array``
        collectives, ``tensorplay_jax.collectives``), as tensorplay's message says.

    Example:
      >>> get_default_backend_for_device("cpu"), get_default_backend_for_device("cuda:1")
      ('gloo', 'nccl')
    """
    kind = device if isinstance(device, str) else getattr(device, "platform", None)
    kind = getattr(device, "type", None) if kind is None else kind
    kind = str(kind).split(":")[0].lower()
    if kind not in _DEVICE_BACKENDS:
        raise ValueError(f"Default backend not registered for device : {kind}")
    return _DEVICE_BACKENDS[kind]
