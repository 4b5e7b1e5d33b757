"""Authentication of a same-host connection, before anything else on it is read.

The handshake itself is ``tensorplay_jax.runtime.handshake`` (HMAC challenge
both ways with the job secret), under this transport's magic string; the
server side runs it in ``rpc/_socket/server``. Connections live in Linux's
abstract socket namespace: there is no file to clean up if a worker dies.
"""

from __future__ import annotations

import socket

from tensorplay_jax.runtime import handshake
from tensorplay_jax.runtime.handshake import NONCE_BYTES as _NONCE  # noqa: F401 (tests)

_MAGIC = b"TPJLOC01"


def connect(address: str, secret: bytes, me: str) -> socket.socket:
    """A socket connected to the server at ``address`` and authenticated as worker ``me``.

    Raises:
      OSError: no such server here, or the handshake failed.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(handshake.HANDSHAKE_TIMEOUT_S)
        sock.connect("\0" + address)
        handshake.authenticate(sock, secret, me, _MAGIC)
    except BaseException:
        sock.close()
        raise
    return sock
