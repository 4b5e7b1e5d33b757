"""Mutual authentication of a stream connection with the job secret, before anything else is read.

The server sends a magic string (which names the protocol) and a random nonce;
the client answers ``HMAC-SHA256(secret, "client" + nonce)``, its own nonce and
its name; the server checks the MAC before it reads anything else (a wrong MAC
closes the connection; nothing was decoded), then proves the secret back the
same way. Used by RPC's same-host socket and by every other authenticated
socket of a job (any ``SOCK_STREAM`` socket: Unix or TCP).

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

__all__ = ["HANDSHAKE_TIMEOUT_S", "NONCE_BYTES", "accept", "authenticate", "recv_exact"]

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
NONCE_BYTES = 32
_MAX_NAME = 512
_U16 = struct.Struct("<H")


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


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


def accept(conn: socket.socket, secret: bytes, magic: bytes) -> str | None:
    """Authenticate an accepted connection: the peer's name, or None (``conn`` is then closed).

    ``magic`` names the protocol (8 bytes); a client of another protocol fails.
    """
    try:
        conn.settimeout(HANDSHAKE_TIMEOUT_S)
        nonce = secrets.token_bytes(NONCE_BYTES)
        conn.sendall(magic + nonce)
        got = recv_exact(conn, 32 + NONCE_BYTES + _U16.size)
        if not hmac.compare_digest(got[:32], _mac(secret, b"client", nonce)):
            # Reject before reading (let alone decoding) anything else the peer sent.
            log.warning("rejected a %s connection without the job secret", magic.decode())
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


def authenticate(sock: socket.socket, secret: bytes, me: str, magic: bytes) -> None:
    """Prove the secret on a connected ``sock`` as ``me`` and check the server's proof.

    Raises:
      ConnectionError: the server speaks another protocol or lacks the secret.
      OSError: the connection failed or timed out.
    """
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    hello = recv_exact(sock, len(magic) + NONCE_BYTES)
    if hello[: len(magic)] != magic:
        raise ConnectionError(f"not a {magic.decode()} server")
    mine = secrets.token_bytes(NONCE_BYTES)
    name = me.encode()
    sock.sendall(_mac(secret, b"client", hello[len(magic) :]) + mine + _U16.pack(len(name)) + name)
    proof = recv_exact(sock, 32)
    if not hmac.compare_digest(proof, _mac(secret, b"server", mine)):
        raise ConnectionError(f"the {magic.decode()} server does not hold the job secret")
    sock.settimeout(None)
