"""The RPC transports a test can pick, as the environment that picks each.

- ``local``: the same-host socket (Unix socket + shared memory);
- ``tcp``: the plain TCP link that pairs on different hosts use (the same-host
  transport off, so workers on loopback reach each other as other hosts would);
- ``grpc``: the gRPC stream (both of those off: what TLS jobs use).
"""

from __future__ import annotations

TRANSPORTS = {
    "local": {"TENSORPLAY_JAX_RPC_LOCAL": "1"},
    "tcp": {"TENSORPLAY_JAX_RPC_LOCAL": "0", "TENSORPLAY_JAX_RPC_TCP": "1"},
    "grpc": {"TENSORPLAY_JAX_RPC_LOCAL": "0", "TENSORPLAY_JAX_RPC_TCP": "0"},
}
NAMES = list(TRANSPORTS)


def env_of(transport: str, **extra: str) -> dict[str, str]:
    """The environment that makes workers use ``transport`` (plus ``extra``)."""
    return {**TRANSPORTS[transport], **extra}
