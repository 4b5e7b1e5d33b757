"""The job secret: where it comes from (never the rendezvous store) and the challenge built on it.

Every connection between the workers of a job (the rendezvous store, the
same-host socket, the gRPC stream) proves knowledge of one shared secret
before anything it sends is decoded. The secret reaches a worker in one of
these ways, first match wins:

1. ``GrpcRpcBackendOptions(secret=...)`` (or ``secret=`` of ``init_process_group``);
2. ``TENSORPLAY_JAX_RPC_SECRET`` in the environment: the launcher
   (``python -m tensorplay_jax.run``) and ``rpc.spawn`` set a fresh random one
   per job for their children;
3. ``TENSORPLAY_JAX_RPC_SECRET_FILE``: a file only its owner can read;
4. a job whose rendezvous address is loopback (every worker on this host):
   the per-user file ``$XDG_CONFIG_HOME/tensorplay_jax/rpc_secret`` (mode 0600,
   created on first use), so workers started by hand find each other.

A job that spans hosts with none of 1-3 refuses to start, unless the user
opts out of authentication explicitly (``TENSORPLAY_JAX_RPC_INSECURE=1`` or
the launcher's ``--insecure``), which warns at start-up. An empty secret is
always an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
import tempfile
import warnings
from pathlib import Path

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import INSECURE_ENV, SECRET_ENV, SECRET_FILE_ENV

__all__ = [
    "INSECURE_ENV",
    "INSECURE_SECRET",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "is_loopback",
    "job_secret",
    "mac",
    "new_secret",
    "read_secret_file",
    "user_secret_file",
]

log = logging.getLogger(__name__)

# The key an explicitly insecure job uses: public, so it authenticates nothing.
INSECURE_SECRET = "tensorplay-jax-insecure-no-authentication"

_HOW = (
    "give every worker the same secret: set TENSORPLAY_JAX_RPC_SECRET (e.g. from "
    "`python -c 'import secrets; print(secrets.token_hex(32))'`), or "
    "TENSORPLAY_JAX_RPC_SECRET_FILE to a file only you can read (chmod 600), or pass "
    "GrpcRpcBackendOptions(secret=...); to run without authentication on a trusted "
    "network, set TENSORPLAY_JAX_RPC_INSECURE=1 (launcher: --insecure)"
)


def new_secret() -> str:
    """A fresh random secret (64 hex characters).

    Example:
      >>> len(new_secret())
      64
    """
    return secrets.token_hex(32)


def mac(secret: str | bytes, role: bytes, nonce: bytes) -> bytes:
    """``HMAC-SHA256(secret, role + nonce)``: one side's answer to the other's challenge.

    Example:
      >>> len(mac("s3cret", b"client", b"\\x00" * 16))
      32
    """
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


def is_loopback(host: str) -> bool:
    """True when ``host`` names this machine's loopback interface only.

    Example:
      >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("198.18.0.1")
      (True, True, False)
    """
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def _check(secret: str, where: str) -> str:
    if not isinstance(secret, str):
        raise TypeError(f"{where}: the job secret must be a str, got {type(secret).__name__}")
    if not secret.strip():
        raise ValueError(
            f"{where}: the job secret is empty; an empty secret never means 'no "
            f"authentication'. {_HOW}"
        )
    return secret.strip()


def read_secret_file(path: str | os.PathLike[str], where: str) -> str:
    """Read a secret file, refusing one that others may read or that is not ours.

    Raises:
      PermissionError: the file is readable by group or others, or owned by another user.
      ValueError: the file is empty.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise FileNotFoundError(f"{where}: cannot read the secret file {str(p)!r}: {e}") from e
    with os.fdopen(fd, "r") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid():
            raise PermissionError(
                f"{where}: the secret file {str(p)!r} belongs to uid {st.st_uid}, not to you "
                f"(uid {os.getuid()}); use a file of your own"
            )
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionError(
                f"{where}: the secret file {str(p)!r} has mode {stat.S_IMODE(st.st_mode):o}; "
                f"others may read it. Run `chmod 600 {p}` (only its owner may read it)"
            )
        return _check(f.read(), f"{where} (file {str(p)!r})")


def user_secret_file() -> Path:
    """The per-user secret file for same-host jobs started by hand."""
    base = settings.raw("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tensorplay_jax" / "rpc_secret"


def _user_secret(where: str) -> str:
    path = user_secret_file()
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rpc_secret.")  # mode 0600
        try:
            os.write(fd, new_secret().encode())
            os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # atomic: a racing worker keeps the first file
        finally:
            os.unlink(tmp)
    return read_secret_file(path, where)


def _insecure_env() -> bool:
    return settings.get_flag(INSECURE_ENV)


def job_secret(
    where: str, *, given: str | None, rendezvous_host: str, insecure: bool = False
) -> str:
    """The job's secret, from the first source that has one (see the module docstring).

    Args:
      where: the public function asking (named in errors).
      given: an explicit secret (``GrpcRpcBackendOptions.secret``), or None.
      rendezvous_host: MASTER_ADDR; a loopback one means a same-host job.
      insecure: the caller's explicit opt-out of authentication (or the
        ``TENSORPLAY_JAX_RPC_INSECURE`` environment variable).

    Raises:
      ValueError: the secret is empty, or the job spans hosts and has no secret.

    Example:
      >>> job_secret("init_rpc", given="abc", rendezvous_host="198.18.0.1")
      'abc'
    """
    if given is not None:
        return _check(given, where)
    env = settings.raw(SECRET_ENV)
    if env is not None:
        return _check(env, f"{where}: {SECRET_ENV}")
    path = settings.raw(SECRET_FILE_ENV)
    if path:
        return read_secret_file(path, f"{where}: {SECRET_FILE_ENV}")
    if insecure or _insecure_env():
        warnings.warn(
            f"{where}: running WITHOUT authentication ({INSECURE_ENV} / insecure=True): anyone "
            "who can reach this job's ports can run code in its workers",
            RuntimeWarning,
            stacklevel=3,
        )
        log.warning("%s: authentication is off for this job", where)
        return INSECURE_SECRET
    if is_loopback(rendezvous_host):
        return _user_secret(where)
    raise ValueError(
        f"{where}: this job's rendezvous address {rendezvous_host!r} is not loopback (the job "
        f"may span hosts) and no job secret was given; {_HOW}"
    )
