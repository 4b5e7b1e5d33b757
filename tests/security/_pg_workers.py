"""Worker functions for the process-group security tests (run in real processes by ``run_workers``).

Each reads its rank from ``RANK`` and its case from ``PGX_*`` environment variables, and
hands what it saw back with ``tests._worker.report`` (named fields the tests assert on).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

from tests._worker import error_text, report


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _raw_client():
    """JAX's coordination-service client, used the way an outsider could: no job secret."""
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client


# ------------------------------------------------------------------ exit after a peer died
def survivor_exit() -> None:
    """Kill rank ``PGX_VICTIM`` (SIGKILL) during all_reduce; the other rank reports and exits.

    The survivor reports ``raised`` (the failing collective's error type, message and
    ``call_s``, how long that call ran; None if none failed) and ``destroyed_at`` (the
    unix time ``destroy_process_group()`` returned), then exits with ``PGX_EXIT``
    (``sys.exit(3)``), or returns normally when ``PGX_EXIT`` is 0.
    """
    import tensorplay_jax.distributed as dist

    rank = int(os.environ["RANK"])
    victim = int(_env("PGX_VICTIM", "1"))
    timeout = float(_env("PGX_TIMEOUT", "5"))
    code = int(_env("PGX_EXIT", "3"))
    x = np.ones(int(_env("PGX_NUMEL", "1024")), np.float32)
    dist.init_process_group("gloo", timeout=timeout, engine=_env("PGX_ENGINE", "auto"))
    np.testing.assert_allclose(np.asarray(dist.all_reduce(x)), 2 * x)
    dist.barrier()
    if rank == victim:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
        while True:
            dist.all_reduce(x)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 6 * timeout:
            started = time.monotonic()
            dist.all_reduce(x)
    except Exception as e:  # PeerDied, TimeoutError or the runtime's error
        took = time.monotonic() - started
        raised = {"type": type(e).__name__, "message": str(e)[:300], "call_s": took}
    else:
        report(raised=None, destroyed_at=None)
        sys.exit(9)
    dist.destroy_process_group()
    report(raised=raised, destroyed_at=time.time())
    if code:
        sys.exit(code)


# ------------------------------------------------------------------ outsiders at the rendezvous
def planted_values() -> None:
    """Values planted in the coordination store without the job secret are refused.

    Rank 1 acts as the outsider: it writes into JAX's key-value store directly (as
    anyone who reaches the coordinator port can), then the rank that would read
    the value makes the call; after each, both ranks rebuild the process group and
    use it. Hands back (``tests._worker.report``) what the call that read a planted
    value raised (``error_text``: None if it was accepted), every collective's result,
    and (rank 0, ``listen``) the local addresses that listen on the coordinator port.
    """
    import tensorplay_jax.distributed as dist
    from tensorplay_jax.process_group import _group as pg

    rank = int(os.environ["RANK"])
    timeout = float(_env("PGX_TIMEOUT", "10"))
    x = np.ones(8, np.float32)
    got: dict[str, object] = {}

    # 1. A replayed XLA descriptor for rank 1's next call, read by rank 0: the outsider
    #    copies rank 1's last (genuine) descriptor to the key of its next one.
    dist.init_process_group("gloo", timeout=timeout, engine="xla")
    if rank == 0:  # the coordinator (MASTER_PORT + 1) of this same-host job
        got["listen"] = sorted(_listening(int(os.environ["MASTER_PORT"]) + 1))
    got["xla/before"] = np.asarray(dist.all_reduce(x)).tolist()
    eng = pg.world().world.engine
    if rank == 1:
        client = _raw_client()
        old = client.key_value_try_get_bytes(f"{eng.key}/{eng.seq}/1")
        client.key_value_set_bytes(f"{eng.key}/{eng.seq + 1}/1", old, allow_overwrite=True)
    dist.barrier()
    if rank == 0:
        got["descriptor"] = error_text(dist.all_reduce, x)
    dist.barrier()
    dist.destroy_process_group()

    # 2. A planted shared-memory segment name for a new shm group, read by rank 1.
    dist.init_process_group("gloo", timeout=timeout, engine="shm")
    got["shm/before"] = np.asarray(dist.all_reduce(x)).tolist()
    w = pg.world()
    key = f"{w.prefix}/g{w.next_gid}/ctrl"
    if rank == 1:
        from tensorplay_jax.process_group._shared_memory import shm_dir

        evil = os.path.join(shm_dir(), f"tpjax-ctrl-{os.getpid()}-0123456789ab")
        with open(evil, "wb") as f:
            f.truncate(64 << 20)  # sparse; large enough to map as a control segment
        try:
            _raw_client().key_value_set_bytes(key, evil.encode(), allow_overwrite=True)
            got["shm-path"] = error_text(dist.new_group, [0, 1])
        finally:
            os.unlink(evil)
    dist.barrier()
    dist.destroy_process_group()

    # 3. The job still works for its real ranks.
    for engine in ("shm", "xla"):
        dist.init_process_group("gloo", timeout=timeout, engine=engine)
        got[f"{engine}/after"] = np.asarray(dist.all_reduce(x * (rank + 1))).tolist()
        pair = dist.new_group([0, 1])
        got[f"{engine}/pair"] = np.asarray(dist.all_reduce(x, group=pair)).tolist()
        dist.destroy_process_group()
    report(**got)


def different_secrets() -> None:
    """Ranks started with different secrets refuse each other's values at init."""
    import tensorplay_jax.distributed as dist

    report(init_error=error_text(dist.init_process_group, "gloo", timeout=10.0))


def _listening(port: int) -> set[str]:
    """Local addresses with a socket in LISTEN state on ``port`` (from /proc/net/tcp*)."""
    out = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.split(":")
            if state != "0A" or int(hexport, 16) != port:
                continue
            out.add(_decode(addr, v6))
    return out


def _decode(addr: str, v6: bool) -> str:
    import ipaddress

    raw = bytes.fromhex(addr)
    # /proc prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.IPv6Address(words) if v6 else ipaddress.IPv4Address(words)
    if v6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)
