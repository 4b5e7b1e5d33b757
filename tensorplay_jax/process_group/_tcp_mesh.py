"""The tcp engine's connections: an authenticated full mesh, and the one poll loop that moves data.

Member i of a group connects to every lower member and accepts every higher one
(addresses travel through the group's signed key-value store). Every connection
proves the job secret both ways (``tensorplay_jax.runtime.handshake``, magic
``TPJPGTC1``) before anything is read from it. A transfer hands the mesh, per peer,
the bytes to send and the buffer to receive into; one ``poll`` loop drives every
non-blocking socket of the call, sending with ``send`` and receiving with
``recv_into`` straight into the result (no copies), so sends and receives to all
peers overlap. A call that sends a lot sends from a second thread while the caller
receives and reduces, so the kernel's copies of both directions run on two cores.
Every wait is bounded by a deadline; a timeout or a lost peer names the rank and
leaves the mesh broken (its streams are then out of step).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import select
import socket
import time
from collections.abc import Callable

from tensorplay_jax.process_group import _kv
from tensorplay_jax.process_group.engine import GroupSpec
from tensorplay_jax.runtime import handshake
from tensorplay_jax.runtime.address import local_address

__all__ = ["MAGIC", "TcpMesh", "connect_mesh"]

MAGIC = b"TPJPGTC1"
_RECV_MAX = 4 << 20  # bytes one recv_into may take
_ERR = select.POLLERR | select.POLLHUP | select.POLLNVAL
_THREAD_MIN = 256 << 10  # calls sending this much send from a second thread
_POLL_MAX_MS = 200  # a sending thread checks this often whether the call failed

Bufs = dict[int, memoryview]  # peer (group index) -> the bytes to send it, or to receive into
OnRecv = Callable[[int, int], None]  # (peer, bytes from it so far), after each receive


def connect_mesh(
    me: int,
    n: int,
    listener: socket.socket,
    addrs: dict[int, tuple[str, int]],
    secret: bytes,
    deadline: float,
    fn: str = "new_group",
) -> dict[int, socket.socket]:
    """Authenticated connections from member ``me`` to every other member of ``n``.

    ``me`` connects to every lower member (at ``addrs[j]``) and accepts every higher
    one on ``listener``; each connection proves the secret both ways first. An
    accepted connection without the secret, or naming no expected member, is closed
    and the wait goes on.

    Raises:
      TimeoutError: a member did not connect by ``deadline`` (``time.monotonic``).
      RuntimeError: a lower member refused us or does not hold the secret.

    Example:
      >>> lst = socket.create_server(("127.0.0.1", 0))
      >>> connect_mesh(0, 1, lst, {}, b"k", time.monotonic() + 1)
      {}
      >>> lst.close()
    """
    socks: dict[int, socket.socket] = {}
    try:
        for j in range(me):
            host, port = addrs[j]
            try:
                s = socket.create_connection((host, port), timeout=_left(deadline, fn, [j]))
                socks[j] = s
                handshake.authenticate(s, secret, str(me), MAGIC)
            except (OSError, ConnectionError) as e:
                raise RuntimeError(
                    f"{fn}: could not join member {j} of the group at {host}:{port}: {e} "
                    "(a different job secret, a firewall, or the member exited)."
                ) from e
        while len(socks) < n - 1:
            missing = [j for j in range(me + 1, n) if j not in socks]
            listener.settimeout(_left(deadline, fn, missing))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue  # _left raises once the deadline has passed
            peer = handshake.accept(conn, secret, MAGIC)
            j = int(peer) if peer is not None and peer.isdigit() else -1
            if j in missing:
                socks[j] = conn
            elif peer is not None:
                conn.close()
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    for s in socks.values():
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
    return socks


def _left(deadline: float, fn: str, waiting: list[int]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{fn}: Timed out connecting the group; no connection from {waiting}.")
    return left


class TcpMesh:
    """This member's authenticated connections to every other member of a group.

    Created collectively by every member: each listens on the address the job's
    other channels use (``runtime.address.local_address``: the route to the
    rendezvous host unless ``TENSORPLAY_JAX_LISTEN_ADDR`` or an interface variable
    says), publishes it (signed) in the coordination store, and joins the mesh
    (:func:`connect_mesh`).

    Args:
      spec: the group; its ``master`` picks the address, its ``secret`` signs in.

    Attributes:
      peers: the other members' group indices.
      broken: why the mesh is out of step (a timeout, a lost peer), or None.
    """

    def __init__(self, spec: GroupSpec):
        me, n, fn = spec.me, spec.n, spec.fn
        self.ranks, self.timeout_s = spec.ranks, spec.timeout_s
        self.broken: str | None = None
        self.sender: concurrent.futures.ThreadPoolExecutor | None = None
        self.stop = False  # tells the sending thread that the call failed
        deadline = time.monotonic() + spec.timeout_s
        addr = local_address(spec.master)
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as lst:
            lst.bind((addr, 0))
            lst.listen(max(n, 8))
            _kv.set(f"{spec.key}/tcp/{me}", f"{addr} {lst.getsockname()[1]}".encode())
            addrs = {}
            for j in range(me):
                raw = _kv.get(f"{spec.key}/tcp/{j}", spec.timeout_s, fn)
                host, port = raw.decode().rsplit(" ", 1)
                addrs[j] = (host, int(port))
            secret = spec.secret.encode()
            self.socks = connect_mesh(me, n, lst, addrs, secret, deadline, fn)
        self.fd_peer = {s.fileno(): j for j, s in self.socks.items()}
        self.peers = [j for j in range(n) if j != me]

    def close(self) -> None:
        """Close this member's connections (and stop its sending thread)."""
        if self.sender is not None:
            self.sender.shutdown(wait=False)
            self.sender = None
        for s in self.socks.values():
            with contextlib.suppress(OSError):
                s.close()
        self.socks = {}

    def exchange(
        self, fn: str, deadline: float, sends: Bufs, recvs: Bufs, on_recv: OnRecv | None = None
    ) -> None:
        """Send ``sends[j]`` to and receive ``recvs[j]`` from each peer j, all at once.

        ``on_recv(j, nbytes)`` runs after each receive with the bytes from j so far.
        A large call sends from a second thread while this one receives and reduces:
        the kernel's copies of both directions then run on two cores.
        """
        if not recvs or sum(b.nbytes for b in sends.values()) < _THREAD_MIN:
            self._pump(fn, deadline, sends, recvs, on_recv)
            return
        if self.sender is None:
            self.sender = concurrent.futures.ThreadPoolExecutor(1, "tpjax-pg-send")
        sending = self.sender.submit(self._pump, fn, deadline, sends, {})
        try:
            self._pump(fn, deadline, {}, recvs, on_recv)
        except BaseException:
            self.stop = True
            with contextlib.suppress(Exception):
                sending.result()
            self.stop = False
            raise
        sending.result()

    def _pump(
        self, fn: str, deadline: float, sends: Bufs, recvs: Bufs, on_recv: OnRecv | None = None
    ) -> None:
        """:meth:`exchange` in this thread (a poll loop over the call's sockets)."""
        out = {j: 0 for j, b in sends.items() if b.nbytes}
        inn = {j: 0 for j, b in recvs.items() if b.nbytes}
        poller = select.poll()
        masks = {}
        for j in set(out) | set(inn):
            masks[j] = (select.POLLOUT if j in out else 0) | (select.POLLIN if j in inn else 0)
            poller.register(self.socks[j], masks[j])
        try:
            while out or inn:
                left = deadline - time.monotonic()
                if left <= 0:
                    waiting = sorted(self.ranks[j] for j in set(out) | set(inn))
                    self.broken = f"timed out waiting for rank(s) {waiting}"
                    raise TimeoutError(
                        f"{fn}: Timed out after {self.timeout_s:.3g}s waiting for rank(s) "
                        f"{waiting} (they did not send or take their data)."
                    )
                if self.stop:
                    raise RuntimeError(f"{fn}: stopped, because the call failed (see above)")
                for fd, ev in poller.poll(min(_POLL_MAX_MS, max(1, int(left * 1000)))):
                    j = self.fd_peer[fd]
                    s = self.socks[j]
                    try:
                        if ev & select.POLLIN and j in inn:
                            buf, p = recvs[j], inn[j]
                            k = s.recv_into(buf[p:], min(buf.nbytes - p, _RECV_MAX))
                            if k == 0:
                                raise ConnectionError("the peer closed the connection")
                            inn[j] = p = p + k
                            if on_recv is not None:
                                on_recv(j, p)
                            if p == buf.nbytes:
                                del inn[j]
                        elif ev & _ERR and not ev & select.POLLOUT:
                            raise ConnectionError("the connection broke")
                        if ev & select.POLLOUT and j in out:
                            buf, p = sends[j], out[j]
                            out[j] = p = p + s.send(buf[p:])
                            if p == buf.nbytes:
                                del out[j]
                    except BlockingIOError:
                        continue
                    except OSError as e:  # ConnectionError included
                        self.broken = f"lost the connection to rank {self.ranks[j]}"
                        raise RuntimeError(
                            f"{fn}: lost the connection to rank {self.ranks[j]} ({e}); it "
                            "probably exited or its host became unreachable."
                        ) from None
                    mask = (select.POLLOUT if j in out else 0) | (select.POLLIN if j in inn else 0)
                    if mask != masks[j]:
                        masks[j] = mask
                        if mask:
                            poller.modify(s, mask)
                        else:
                            poller.unregister(s)
        finally:
            for j, m in masks.items():
                if m:
                    with contextlib.suppress(KeyError, ValueError, OSError):
                        poller.unregister(self.socks[j])
