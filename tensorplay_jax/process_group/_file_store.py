"""``FileStore``: tensorplay's store in one file, for processes that share a filesystem.

The file is ``runtime.file_store``'s log (what ``init_method="file://"`` meets in:
records appended under ``fcntl.flock``, created owner-only, counted in and out by
each handle, deleted by the last one), behind the ``Store`` interface. As in
tensorplay, its waits poll the file and the queues are not there
(``NotImplementedError``); a wait that runs out raises ``DistStoreError``.

Example:
  >>> import os, tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "store")
  >>> a, b = FileStore(path, 2), FileStore(path, 2)
  >>> a.set("k", "v"); b.get("k"), b.add("n", 2), a.add("n", 3)
  (b'v', 2, 5)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from tensorplay_jax.process_group._errors import DistStoreError
from tensorplay_jax.process_group._store import Store
from tensorplay_jax.runtime import file_store as _file

__all__ = ["FileStore"]


def _no_queues(*_: Any) -> Any:
    raise NotImplementedError("queue support is not implemented.")


class _FileOps:
    """The store operations on a ``runtime.file_store.FileStore``."""

    queue_push = queue_pop = queue_len = staticmethod(_no_queues)

    def __init__(self, store: _file.FileStore) -> None:
        self._s = store
        self.set, self.compare_set, self.check = store.set, store.compare_set, store.check
        self.delete_key, self.num_keys, self.append = store.delete_key, store.num_keys, store.append

    def add(self, key: str, amount: int) -> int:
        try:
            return self._s.add(key, amount)
        except ValueError:
            raise ValueError(f"Store.add: the value of key {key!r} is not an integer") from None

    def wait(self, keys: Sequence[str], timeout: float) -> None:
        try:
            self._s.wait(list(keys), timeout)
        except _file.FileStoreTimeout as e:
            raise DistStoreError(f"wait timeout: {e}") from None

    def get(self, key: str, timeout: float) -> bytes:
        self.wait([key], timeout)
        return self._s.get(key, 0.0)

    def multi_get(self, keys: Sequence[str], timeout: float) -> list[bytes]:
        self.wait(keys, timeout)
        return [self._s.get(k, 0.0) for k in keys]

    def multi_set(self, keys: Sequence[str], values: Sequence[bytes]) -> None:
        if len(keys) != len(values):
            raise ValueError(
                f"Store.multi_set: {len(keys)} keys but {len(values)} values; give one each"
            )
        for k, v in zip(keys, values, strict=True):
            self._s.set(k, v)


class FileStore(Store):
    """A store in the file ``file_name`` (tensorplay's ``FileStore``).

    Args:
      file_name: the file; created owner-only when missing. A file another user may
        write, or that belongs to another user, is refused.
      world_size: accepted for tensorplay's signature: the file is deleted when the
        last handle on it closes, however many there were.

    Raises:
      ValueError: the file cannot be used (a directory, not creatable, not owner-only).
    """

    def __init__(self, file_name: str, world_size: int = -1) -> None:
        super().__init__()
        handle = _file.FileStore(file_name, self._timeout_s, fn="FileStore")
        self.path = handle.path
        self._ops = _FileOps(handle)
        weakref.finalize(self, handle.close)

    def has_extended_api(self) -> bool:
        """False, as tensorplay's: no queues."""
        return False
