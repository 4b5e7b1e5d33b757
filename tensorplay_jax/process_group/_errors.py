"""tensorplay's distributed error classes: ``DistError`` (a ``RuntimeError``) and its kinds.

Ported code names them in ``except`` clauses, so they exist with tensorplay's
hierarchy. What raises them here: ``DistStoreError`` is the group's key-value store
(JAX's coordination service, ``_kv``) not answering in time, where that reaches the
caller (it is also a ``TimeoutError``, as the rest of the package's timeouts). A peer
lost in a collective is a plain ``RuntimeError`` naming it, as tensorplay's gloo
raises; ``DistBackendError`` and ``DistNetworkError`` are not raised here.

Example:
  >>> issubclass(DistStoreError, DistError) and issubclass(DistError, RuntimeError)
  True
"""

from __future__ import annotations

__all__ = ["DistBackendError", "DistError", "DistNetworkError", "DistStoreError"]


class DistError(RuntimeError):
    """A distributed call failed (tensorplay's ``torch.distributed.DistError``)."""


class DistBackendError(DistError):
    """A collective failed in the engine that moves its data."""


class DistStoreError(DistError):
    """The group's key-value store failed or did not answer in time."""


class DistNetworkError(DistError):
    """A connection between processes failed."""
