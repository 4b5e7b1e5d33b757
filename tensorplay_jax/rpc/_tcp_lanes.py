"""Lanes of a TCP link: extra connections that carry the parts of a long message at once.

One TCP stream moves its bytes through one sending and one receiving thread,
each copying every byte between the program and the kernel; a long message
split over several connections ("lanes") is copied by several threads at
once, on as many cores. A link (``_tcp.TcpLink``, the "primary" connection)
may have lanes besides it:

- The client (``connect_tcp``) sends ``LANE`` (``token``, index 0, the lane
  count) on the primary, then opens the other connections in the background,
  each authenticated like the primary and starting with ``LANE`` (``token``,
  its index). The server finds the primary by ``token`` (:class:`Registry`);
  a lane naming a token it does not hold is hung up. Until every lane is up at
  an end, that end sends everything on the primary.
- A message of at least ``STRIPE_MIN`` bytes goes in parts: ``STRIPED``
  (``u64`` message length, ``u8`` lane count) with part 0 on the primary, and
  ``PART`` frames (the length of part ``i``) with part ``i`` on lane ``i``,
  all under one lock, so every lane carries its parts in the primary's order.
  :func:`cuts` gives the parts' bounds from the length and the count alone.
- The primary's reader takes one mapping for the whole message, gives each
  lane's reader its slice (:meth:`Stripes.post`), receives part 0, and waits
  for the others (:meth:`Stripes.wait`); each lane's reader receives its part
  straight into its slice. The arrays then sit on that one mapping.
- A lane and its primary live and die together: either one closing shuts the
  other's socket down, and a reader waiting for the other wakes.

``TENSORPLAY_JAX_RPC_TCP_LANES`` sets the connections per link (default 3;
1: the primary alone, every message whole on it).
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from tensorplay_jax.rpc._framing import StreamError
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import TCP_LANES_ENV

__all__ = ["Registry", "Stripes", "cuts", "lane_count"]

_LANE, _STRIPED, _PART = 4, 5, 6  # frame kinds (the socket base's INLINE is 1)
_HELLO = struct.Struct("<16sBB")  # token, this connection's index, the lane count
_STRIPE = struct.Struct("<B")  # after a STRIPED frame's head: the lane count
MAX_LANES = 8
STRIPE_MIN = 2 << 20  # a message this long or longer is striped over the lanes
_WAKE_S = 1.0  # a waiting reader looks at its link's life at least this often


def lane_count() -> int:
    """The connections per TCP link (``TENSORPLAY_JAX_RPC_TCP_LANES``, within 1..MAX_LANES).

    Raises:
      ValueError: the setting is not a whole number from 1 to ``MAX_LANES``.
    """
    raw = settings.raw(TCP_LANES_ENV)
    try:
        got = settings.get_int(TCP_LANES_ENV)
        n = 1 if got is None else got
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_LANES:
        raise ValueError(
            f"{TCP_LANES_ENV}={raw!r}: give the connections per TCP link, a whole number "
            f"from 1 (no lanes) to {MAX_LANES}"
        )
    return n


def cuts(n: int, lanes: int) -> list[int]:
    """The bounds of the ``lanes`` parts of an ``n``-byte message (64-byte multiples inside).

    Example:
      >>> cuts(1000, 2)
      [0, 512, 1000]
    """
    step = -(-n // lanes)
    step += -step % 64
    return [min(n, i * step) for i in range(lanes)] + [n]


def slices(views: Sequence[memoryview], lo: int, hi: int) -> list[memoryview]:
    """The bytes ``lo:hi`` of the concatenation of ``views``, as views (no copy).

    Example:
      >>> [bytes(v) for v in slices([memoryview(b"abc"), memoryview(b"defg")], 2, 5)]
      [b'c', b'de']
    """
    out: list[memoryview] = []
    pos = 0
    for v in views:
        end = pos + v.nbytes
        if end > lo and pos < hi:
            out.append(v[max(lo - pos, 0) : min(hi, end) - pos])
        pos = end
        if pos >= hi:
            break
    return out


def hello(token: bytes, index: int, lanes: int) -> bytes:
    """The ``LANE`` frame body that opens connection ``index`` of a link (0: the primary)."""
    return _HELLO.pack(token, index, lanes)


def read_hello(body: bytes) -> tuple[bytes, int, int]:
    """``(token, index, lanes)`` of a ``LANE`` frame body.

    Raises:
      StreamError: not a hello, or an index or count out of range.
    """
    if len(body) != _HELLO.size:
        raise StreamError(f"a LANE frame of {len(body)} bytes (a hello has {_HELLO.size})")
    token, index, lanes = _HELLO.unpack(body)
    if not (2 <= lanes <= MAX_LANES and index < lanes):
        raise StreamError(f"a LANE frame for connection {index} of {lanes} (at most {MAX_LANES})")
    return token, index, lanes


class _Done:
    """How many parts of one striped message are still to arrive."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class Stripes:
    """A primary link's lanes: the senders once all are up, and the slices their readers fill.

    Attributes:
      lanes: the lane links by index (index 0 unused: the primary itself), as they come up.
      count: the lanes the link should have (0: none).
      tx: the lane links a sender stripes over (index order), once all ``count - 1`` are up.
    """

    def __init__(self, primary: Any) -> None:
        self._primary = weakref.ref(primary)  # no cycle: a closed link is freed at once
        self.count = 0
        self.lanes: dict[int, Any] = {}
        self.tx: list[Any] = []
        self.send_lock = threading.Lock()  # orders the parts on every lane as on the primary
        self._cond = threading.Condition()
        self._slots: dict[int, collections.deque[tuple[Any, _Done]]] = {}

    def attach(self, index: int, lane: Any, count: int) -> None:
        """Take ``lane`` as connection ``index`` of ``count``; senders use the lanes once all
        are up.

        Raises:
          StreamError: a second connection ``index``, or a count other than the first one.
          ConnectionError: the link has closed.
        """
        with self._cond:
            primary = self._primary()
            if primary is None or not primary.alive:  # (end() has run, or runs after this)
                raise ConnectionError("the link of this lane has closed")
            if (self.count and count != self.count) or index in self.lanes:
                raise StreamError(f"a second lane {index} (of {count}) for the link to a peer")
            self.count = count
            self.lanes[index] = lane
            lane.stripes_of = self
            lane.lane_index = index
            if len(self.lanes) == count - 1:
                self.tx = [self.lanes[i] for i in range(1, count)]
            self._cond.notify_all()

    def post(self, parts: Sequence[Any]) -> _Done:
        """Give lane ``i``'s reader ``parts[i - 1]`` (where its part goes); what :meth:`wait`
        takes."""
        done = _Done(len(parts))
        with self._cond:
            for i, part in enumerate(parts, 1):
                self._slots.setdefault(i, collections.deque()).append((part, done))
            self._cond.notify_all()
        return done

    def take(self, index: int) -> tuple[Any, _Done]:
        """Where lane ``index``'s reader puts its next part (waits for the primary to post it).

        Raises:
          ConnectionError: the link closed first.
        """
        with self._cond:
            while not self._slots.get(index):
                if not self._live():
                    raise ConnectionError("the link closed while a lane waited for its part")
                self._cond.wait(_WAKE_S)
            return self._slots[index].popleft()

    def filled(self, done: _Done) -> None:
        """A lane's part has arrived."""
        with self._cond:
            done.left -= 1
            self._cond.notify_all()

    def wait(self, done: _Done) -> None:
        """Wait until every lane's part of a message has arrived.

        Raises:
          ConnectionError: the link or one of its lanes closed first.
        """
        with self._cond:
            while done.left:
                if not self._live():
                    raise ConnectionError("a lane of the link closed mid-message")
                self._cond.wait(_WAKE_S)

    @property
    def primary(self) -> Any:
        """The primary link (None once it is gone)."""
        return self._primary()

    def _live(self) -> bool:
        primary = self._primary()
        return (
            primary is not None
            and primary.alive
            and all(lane.alive for lane in self.lanes.values())
        )

    def wake(self) -> None:
        """Wake every waiting reader (a connection of the link just closed)."""
        with self._cond:
            self._cond.notify_all()

    def end(self) -> list[Any]:
        """The link closed: let go of its lanes and posted slices, wake every waiting reader;
        the lanes it had."""
        with self._cond:
            lanes = list(self.lanes.values())
            self.lanes.clear()
            self.tx = []
            self._slots.clear()
            self._cond.notify_all()
        return lanes


def shut(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways (its reader wakes with end of stream); no lock taken."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Registry:
    """A server's primary links by the token their client named, for their lanes to find."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._links: dict[bytes, Any] = {}
        self._closed = False

    def close(self) -> None:
        """The server stopped: lanes waiting for their link's hello give up now."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def add(self, token: bytes, link: Any) -> None:
        """Keep ``link`` under ``token`` (until it closes: :meth:`drop`).

        Raises:
          StreamError: another link holds ``token``.
        """
        with self._cond:
            if token in self._links:
                raise StreamError("a LANE token already taken")
            self._links[token] = link
            self._cond.notify_all()

    def find(self, token: bytes, timeout: float) -> Any:
        """The live link under ``token``, waiting up to ``timeout`` s for its hello to be read.

        Raises:
          StreamError: no live link took ``token`` in time.
          ConnectionError: the server stopped first (the lane's connection just ends: not
            a protocol error, so its owner's ``on_malformed`` hears nothing of it).
        """
        with self._cond:
            if not self._cond.wait_for(lambda: token in self._links or self._closed, timeout):
                raise StreamError("a lane for a link this server does not hold")
            if token not in self._links:
                raise ConnectionError("a lane that arrived as the server stopped")
            link = self._links[token]
        if not link.alive:
            raise StreamError("a lane for a link that has closed")
        return link

    def drop(self, link: Any) -> None:
        """Forget ``link`` (it closed)."""
        with self._cond:
            for token in [t for t, v in self._links.items() if v is link]:
                del self._links[token]
