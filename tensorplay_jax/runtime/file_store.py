"""A key-value store in one file (tensorplay's ``FileStore``), what ``init_method="file://"`` uses.

The file is an append-only log of records (set, delete), each appended and read
under an exclusive ``fcntl.flock`` on the file, so that any number of processes,
on this host or on hosts that share the filesystem, may use it at once. Each
handle reads the records appended since its last look and keeps the result.

Like tensorplay's ``FileStore``:

- the first process to open the file creates it (an existing empty file, such
  as a ``tempfile.NamedTemporaryFile``, is used as it is);
- every handle counts itself in the file when opened and out when closed; the
  handle that brings the count to zero deletes the file, so a job that shut
  down cleanly leaves nothing behind and the next job with the same file name
  starts afresh. A process killed with SIGKILL never counts itself out: then
  the file stays, and must be removed before the next job uses the name;
- every wait has a timeout;
- a record torn by a writer that died mid-write is cut off by the next writer.

What protects the store is the file's permissions: it is created owner-only
(``0600``), and a file that another user may write (group- or world-writable),
or that belongs to another user, is refused.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "store")
    >>> a, b = FileStore(path), FileStore(path)
    >>> a.set("k", b"v"); b.get("k", timeout=1.0)
    b'v'
    >>> b.add("n", 2), a.add("n", 3)
    (2, 5)
    >>> a.close(); os.path.exists(path)
    True
    >>> b.close(); os.path.exists(path)
    False
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import threading
import time

from tensorplay_jax.runtime.settings import FILE_STORE_POLL_MAX_S, FILE_STORE_POLL_MIN_S

__all__ = ["FileStore", "FileStoreError", "FileStoreTimeout"]

_REFCOUNT = "\0tpj/refcount"  # how many handles have the file open (not a user key)
_SET, _DELETE = b"S", b"D"
_HEAD = struct.Struct("<cII")  # kind, key length, value length


class FileStoreError(ValueError):
    """The store's file cannot be used (a directory, an unwritable path, unsafe permissions)."""


class FileStoreTimeout(TimeoutError):
    """A key did not appear in the store within the wait's timeout."""


def _open_file(path: str, fn: str) -> int:
    """A read-write descriptor of ``path``, created owner-only if missing; checked."""
    hint = "name a file (created if missing) in a directory this user can write"
    if os.path.isdir(path):
        raise FileStoreError(f"{fn}: the store file {path!r} is a directory; {hint}.")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise FileStoreError(
            f"{fn}: cannot open or create the store file {path!r} ({e.strerror}); {hint}, on "
            "a filesystem every rank of the job shares."
        ) from None
    st = os.fstat(fd)
    why = ""
    if not stat.S_ISREG(st.st_mode):
        why = "it is not a regular file"
    elif st.st_uid != os.getuid():
        why = f"it belongs to another user (uid {st.st_uid})"
    elif st.st_mode & 0o022:
        why = f"other users may write it (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
    if why:
        os.close(fd)
        raise FileStoreError(
            f"{fn}: refusing the store file {path!r}: {why}. Whoever can write it can "
            "redirect the job's rendezvous."
        )
    return fd


class FileStore:
    """A key-value store shared through the file at ``path`` (see the module docstring).

    Thread-safe; values are bytes (a str is stored as its UTF-8).

    Args:
      path: the file; created (owner-only) when missing.
      timeout: the default timeout of :meth:`get` and :meth:`wait`, in seconds.
      fn: the public function using the store (named in errors).

    Raises:
      FileStoreError: ``path`` is a directory, cannot be created or opened, or may
        be written by another user.
    """

    def __init__(self, path: str, timeout: float = 300.0, *, fn: str = "FileStore") -> None:
        self.path, self.timeout, self.fn = os.path.abspath(path), float(timeout), fn
        self._lock = threading.Lock()
        self._fd = -1
        # The file can be deleted (by the last handle closing) between open and lock:
        # then count in on a fresh file instead of on the deleted one.
        for _ in range(100):
            self._fd = _open_file(self.path, fn)
            self._pos, self._data = 0, {}
            with self._locked():
                if self._same_file():
                    self._add_locked(_REFCOUNT, 1)
                    return
            os.close(self._fd)
        raise FileStoreError(f"{fn}: the store file {self.path!r} keeps being deleted.")

    # ---------------------------------------------------------------- the log

    @contextlib.contextmanager
    def _locked(self):
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.fn}: the store {self.path!r} is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._read_new()
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _same_file(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def _read_new(self) -> None:
        """Apply the records appended since the last read (a torn tail is left unread)."""
        size = os.fstat(self._fd).st_size
        if size <= self._pos:
            return
        buf = os.pread(self._fd, size - self._pos, self._pos)
        at = 0
        while at + _HEAD.size <= len(buf):
            kind, klen, vlen = _HEAD.unpack_from(buf, at)
            end = at + _HEAD.size + klen + vlen
            if end > len(buf):
                break
            key = buf[at + _HEAD.size : at + _HEAD.size + klen].decode()
            if kind == _SET:
                self._data[key] = buf[at + _HEAD.size + klen : end]
            else:
                self._data.pop(key, None)
            at = end
        self._pos += at

    def _append(self, kind: bytes, key: str, value: bytes = b"") -> None:
        """Append one record (the lock is held, and the log read up to ``_pos``)."""
        k = key.encode()
        rec = _HEAD.pack(kind, len(k), len(value)) + k + value
        if os.fstat(self._fd).st_size > self._pos:
            # Records are written whole under the lock: bytes past the last whole one
            # are a writer's that died mid-record. Cut them, or no record after is read.
            os.ftruncate(self._fd, self._pos)
        os.pwrite(self._fd, rec, self._pos)
        self._read_new()

    def _add_locked(self, key: str, n: int) -> int:
        v = int(self._data.get(key, b"0")) + n
        self._append(_SET, key, str(v).encode())
        return v

    # ---------------------------------------------------------------- the API

    def set(self, key: str, value: bytes | str) -> None:
        """Store ``value`` under ``key`` (overwriting)."""
        v = value.encode() if isinstance(value, str) else bytes(value)
        with self._locked():
            self._append(_SET, key, v)

    def add(self, key: str, n: int) -> int:
        """Add ``n`` to the integer under ``key`` (0 when missing); the new value."""
        with self._locked():
            return self._add_locked(key, n)

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        """Set ``key`` to ``desired`` if it holds ``expected`` (or is missing and
        ``expected`` is empty); the value it holds afterwards."""
        e = expected.encode() if isinstance(expected, str) else bytes(expected)
        d = desired.encode() if isinstance(desired, str) else bytes(desired)
        with self._locked():
            have = self._data.get(key)
            if have == e or (have is None and not e):
                self._append(_SET, key, d)
                return d
            return have if have is not None else e

    def append(self, key: str, value: bytes | str) -> None:
        """Append ``value`` to the value under ``key`` (set it when missing)."""
        v = value.encode() if isinstance(value, str) else bytes(value)
        with self._locked():
            self._append(_SET, key, self._data.get(key, b"") + v)

    def check(self, keys: list[str]) -> bool:
        """Whether every key of ``keys`` is set now (no waiting)."""
        with self._locked():
            return all(k in self._data for k in keys)

    def delete_key(self, key: str) -> bool:
        """Remove ``key``; whether it was there."""
        with self._locked():
            if key not in self._data:
                return False
            self._append(_DELETE, key)
            return True

    def num_keys(self) -> int:
        """How many keys are set (the store's own bookkeeping not counted)."""
        with self._locked():
            return sum(1 for k in self._data if not k.startswith("\0"))

    def wait(self, keys: list[str], timeout: float | None = None) -> None:
        """Block until every key of ``keys`` is set.

        Raises:
          FileStoreTimeout: some did not appear within ``timeout`` seconds (default:
            the store's); the message names them.
        """
        t = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + t
        pause = FILE_STORE_POLL_MIN_S
        while True:
            with self._locked():
                missing = [k for k in keys if k not in self._data]
            if not missing:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise FileStoreTimeout(
                    f"{self.fn}: keys {missing} did not appear in the store file {self.path!r} "
                    f"within {t:g} s; did every rank start with the same file?"
                )
            time.sleep(min(pause, left))
            pause = min(2 * pause, FILE_STORE_POLL_MAX_S)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value under ``key``, waiting up to ``timeout`` seconds for it to be set.

        Raises:
          FileStoreTimeout: it was not set in time.
        """
        self.wait([key], timeout)
        with self._locked():
            return self._data[key]

    def close(self) -> None:
        """Count this handle out; the last one out deletes the file. Idempotent."""
        with self._lock:
            if self._fd < 0:
                return
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self._read_new()
                if self._add_locked(_REFCOUNT, -1) <= 0 and self._same_file():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)
            except OSError as e:
                if e.errno not in (errno.ESTALE, errno.ENOENT):
                    raise
            finally:
                os.close(self._fd)  # releases the lock
                self._fd = -1

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
