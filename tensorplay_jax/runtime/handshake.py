"""Mutual authentication of a stream connection with the job secret, before anything else is read.

The server sends a magic string (which names the protocol) and a random nonce;
the client answers ``HMAC-SHA256(secret, "client" + nonce)``, its own nonce and
its name; the server checks the MAC before it reads anything else (a wrong MAC
closes the connection; nothing was decoded), then proves the secret back the
same way. Used by every authenticated socket of a job (any ``SOCK_STREAM``
socket: Unix or TCP): RPC's socket transports, its rendezvous store, the TCP
process-group engine. The client's failures are told apart
(:class:`WrongProtocol`, :class:`SecretRefused`, :class:`Impostor`, all
``ConnectionError``), so each caller can say what to fix.

Example:
    >>> import socket, threading
    >>> a, b = socket.socketpair()
    >>> got = []
    >>> t = threading.Thread(target=lambda: got.append(accept(a, b"k", b"TPJDEMO1")))
    >>> t.start(); authenticate(b, b"k", "worker1", b"TPJDEMO1"); t.join()
    >>> got
    ['worker1']
    >>> a.close(); b.close()
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import struct

__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "NONCE_BYTES",
    "Impostor",
    "SecretRefused",
    "WrongProtocol",
    "accept",
    "authenticate",
    "recv_exact",
]

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
NONCE_BYTES = 32
_MAX_NAME = 512
_U16 = struct.Struct("<H")


class WrongProtocol(ConnectionError):
    """The server did not greet with the expected magic string (another protocol, or none)."""


class SecretRefused(ConnectionError):
    """The server closed the connection after the client's answer: it holds another secret."""


class Impostor(ConnectionError):
    """The server's answer does not prove the secret: it is not one of the job's."""


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def _peer_address(sock: socket.socket) -> str:
    try:
        return str(sock.getpeername() or "a local socket")
    except OSError:
        return "an unknown address"


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``.

    Raises:
      ConnectionError: the peer closed the connection first.

    Example:
      >>> import socket
      >>> a, b = socket.socketpair(); a.sendall(b"abc"); recv_exact(b, 3)
      b'abc'
      >>> a.close(); b.close()
    """
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionError("connection closed during the handshake")
        out += got
    return bytes(out)


def accept(
    conn: socket.socket, secret: bytes, magic: bytes, timeout: float = HANDSHAKE_TIMEOUT_S
) -> str | None:
    """Authenticate an accepted connection: the peer's name, or None (``conn`` is then closed).

    ``magic`` names the protocol; a client of another protocol fails. The client
    has ``timeout`` seconds to answer.
    """
    try:
        conn.settimeout(timeout)
        nonce = secrets.token_bytes(NONCE_BYTES)
        conn.sendall(magic + nonce)
        got = recv_exact(conn, 32 + NONCE_BYTES + _U16.size)
        if not hmac.compare_digest(got[:32], _mac(secret, b"client", nonce)):
            # Reject before reading (let alone decoding) anything else the peer sent.
            log.warning(
                "%s: refused a connection from %s without the job secret",
                magic.decode(),
                _peer_address(conn),
            )
            conn.close()
            return None
        (n,) = _U16.unpack_from(got, 32 + NONCE_BYTES)
        if n > _MAX_NAME:
            raise ConnectionError("peer name too long")
        peer = recv_exact(conn, n).decode("utf-8", "replace")
        conn.sendall(_mac(secret, b"server", got[32 : 32 + NONCE_BYTES]))
        conn.settimeout(None)
    except (OSError, ConnectionError) as e:
        log.debug("%s handshake failed: %s", magic.decode(), e)
        conn.close()
        return None
    return peer


def authenticate(
    sock: socket.socket,
    secret: bytes,
    me: str,
    magic: bytes,
    timeout: float = HANDSHAKE_TIMEOUT_S,
) -> None:
    """Prove the secret on a connected ``sock`` as ``me`` and check the server's proof.

    Each step waits at most ``timeout`` seconds.

    Raises:
      WrongProtocol: the server speaks another protocol, or did not greet in time.
      SecretRefused: the server refused this secret (it closed the connection).
      Impostor: the server does not hold the secret.
      OSError: the connection failed or timed out after the greeting.
    """
    sock.settimeout(timeout)
    try:
        hello = recv_exact(sock, len(magic) + NONCE_BYTES)
    except OSError as e:  # closed, or silent: whatever listens there is not a server of ours
        raise WrongProtocol(f"not a {magic.decode()} server ({e})") from None
    if hello[: len(magic)] != magic:
        raise WrongProtocol(f"not a {magic.decode()} server")
    mine = secrets.token_bytes(NONCE_BYTES)
    name = me.encode()
    sock.sendall(_mac(secret, b"client", hello[len(magic) :]) + mine + _U16.pack(len(name)) + name)
    try:
        proof = recv_exact(sock, 32)
    except ConnectionError:
        raise SecretRefused(f"the {magic.decode()} server refused the job secret") from None
    if not hmac.compare_digest(proof, _mac(secret, b"server", mine)):
        raise Impostor(f"the {magic.decode()} server does not hold the job secret")
    sock.settimeout(None)
