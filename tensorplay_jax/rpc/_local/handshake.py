"""Authentication of a same-host connection, before anything else on it is read.

The server sends a magic string and a random nonce; the client answers
``HMAC-SHA256(secret, "client" + nonce)``, its own nonce and its worker name;
the server checks the MAC before it reads anything else (a wrong MAC closes
the connection; nothing was decoded), then proves the secret back the same
way. Connections live in Linux's abstract socket namespace: there is no file
to clean up if a worker dies.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import struct

log = logging.getLogger(__name__)

_HANDSHAKE_TIMEOUT_S = 10.0
_MAGIC = b"TPJLOC01"
_NONCE = 32
_MAX_NAME = 512
_U16 = struct.Struct("<H")


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionError("connection closed during the handshake")
        out += got
    return bytes(out)


def accept(conn: socket.socket, secret: bytes) -> str | None:
    """Authenticate an accepted connection: the peer's worker name, or None (``conn`` closed)."""
    try:
        conn.settimeout(_HANDSHAKE_TIMEOUT_S)
        nonce = secrets.token_bytes(_NONCE)
        conn.sendall(_MAGIC + nonce)
        got = _recv_exact(conn, 32 + _NONCE + _U16.size)
        if not hmac.compare_digest(got[:32], _mac(secret, b"client", nonce)):
            # Reject before reading (let alone decoding) anything else the peer sent.
            log.warning("rpc: rejected a same-host connection without the job secret")
            conn.close()
            return None
        (n,) = _U16.unpack_from(got, 32 + _NONCE)
        if n > _MAX_NAME:
            raise ConnectionError("peer name too long")
        peer = _recv_exact(conn, n).decode("utf-8", "replace")
        conn.sendall(_mac(secret, b"server", got[32 : 32 + _NONCE]))
        conn.settimeout(None)
    except (OSError, ConnectionError) as e:
        log.debug("rpc: same-host handshake failed: %s", e)
        conn.close()
        return None
    return peer


def connect(address: str, secret: bytes, me: str) -> socket.socket:
    """A socket connected to the server at ``address`` and authenticated as worker ``me``.

    Raises:
      OSError: no such server here, or the handshake failed.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        sock.connect("\0" + address)
        hello = _recv_exact(sock, len(_MAGIC) + _NONCE)
        if hello[: len(_MAGIC)] != _MAGIC:
            raise ConnectionError("not a tensorplay_jax same-host RPC server")
        mine = secrets.token_bytes(_NONCE)
        name = me.encode()
        sock.sendall(
            _mac(secret, b"client", hello[len(_MAGIC) :]) + mine + _U16.pack(len(name)) + name
        )
        proof = _recv_exact(sock, 32)
        if not hmac.compare_digest(proof, _mac(secret, b"server", mine)):
            raise ConnectionError("the same-host server does not hold the job secret")
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock
