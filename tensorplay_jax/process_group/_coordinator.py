"""JAX's coordination service in a small process of its own, so that it outlives every rank.

Why: ``jax.distributed.initialize`` runs the service inside process 0 with two
behaviours that keep a survivor from leaving after a peer dies (issue 11, hole 5):

- at exit every process waits at a *shutdown barrier* for all the others
  (``shutdown_timeout_seconds``, default 300 s); a dead peer fails it only when its
  heartbeat times out (``heartbeat_timeout_seconds``, default 100 s), and that failure
  is pushed to every process, whose runtime then aborts (SIGABRT);
- when process 0 dies, every other process's runtime aborts at once: its error
  polling RPC (``PollForError``) fails and the client's fatal callback runs. jaxlib
  0.10 offers no usable replacement (a Python ``missed_heartbeat_callback`` crashes
  with ``std::bad_cast``).

So rank 0 starts the service here instead, in *recoverable* mode (the
``recoverable`` flag of ``get_distributed_runtime_service``, what
``jax_enable_recoverability`` sets): a process that stops sending heartbeats is
marked failed without the error being pushed to the others, and a process that
shuts down disconnects at once instead of waiting at the shutdown barrier. This
process joins the cluster as one extra task (id = world size, invisible to
``jax.process_count()``) and waits, through the service's ``GetAliveTasks``
(which returns once a task has disconnected or been declared dead), until every
rank has left; then it stops the service and exits.

Run as a script (``python -P _coordinator.py BIND ADDRESS WORLD HEARTBEAT INIT``): it
imports only ``jaxlib``, answers ``ready`` (or ``error ...``) on stdout, then closes it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["start"]

LOG_ENV = "TENSORPLAY_JAX_PG_COORDINATOR_LOG"  # a file for the coordinator's own log


def start(
    bind: str, address: str, world_size: int, heartbeat_s: int, init_timeout_s: int
) -> subprocess.Popen:
    """Start the coordinator process; return once it listens on ``bind``.

    Raises:
      RuntimeError: it could not listen (e.g. the port is taken) or did not answer.
    """
    from tensorplay_jax.runtime import settings
    from tensorplay_jax.runtime.settings import PG_COORDINATOR_START_S

    log = settings.raw(LOG_ENV)
    err = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (handed to the child)
    args = [bind, address, str(world_size), str(heartbeat_s), str(init_timeout_s)]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    finally:
        if log:
            err.close()
    answer = _read_line(proc, time.monotonic() + PG_COORDINATOR_START_S)
    proc.stdout.close()
    if answer != "ready":
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        code = proc.wait()
        if answer.startswith("error "):
            why = answer[len("error ") :]
        elif code < 0 and code != -signal.SIGKILL:
            why = f"it died of {signal.Signals(-code).name} before it listened"
        else:
            why = f"it did not answer within {PG_COORDINATOR_START_S:g} s"
        raise RuntimeError(
            f"init_process_group: could not start the JAX coordination service on {bind}: "
            f"{why}. Is MASTER_PORT + 1 free on this host? (set {LOG_ENV} to a file for "
            "its log)"
        )
    return proc


def _read_line(proc: subprocess.Popen, deadline: float) -> str:
    fd, got = proc.stdout.fileno(), b""
    while b"\n" not in got:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        got += chunk
    return got.decode(errors="replace").split("\n", 1)[0].strip()


def _port_taken(bind: str) -> str:
    """Why the service could not listen on ``bind`` ("host:port"), or "" if it can."""
    import socket

    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's listener does
        try:
            s.bind((host, int(port)))
        except OSError as e:
            return f"port {port} on {host} is taken ({e.strerror})"
    return ""


def _answer(line: str) -> None:
    """Tell the parent, then point stdout at /dev/null (the parent closes its end)."""
    os.write(1, (line + "\n").encode())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def main(argv: list[str]) -> int:
    """Serve the coordination service until every rank has left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the ranks; they stop us
    bind, address = argv[0], argv[1]
    n, heartbeat_s, init_s = (int(a) for a in argv[2:5])
    taken = _port_taken(bind)
    if taken:  # jaxlib's service crashes (SIGSEGV) when it cannot listen: say why first
        _answer(f"error {taken}")
        return 1
    try:
        from jaxlib import _jax

        service = _jax.get_distributed_runtime_service(
            bind, n + 1, heartbeat_timeout=heartbeat_s, recoverable=True
        )
    except Exception as e:
        _answer(f"error {type(e).__name__}: {e}".replace("\n", " "))
        return 1
    _answer("ready")
    client = _jax.get_distributed_runtime_client(
        address, n, init_timeout=init_s, heartbeat_timeout=heartbeat_s, use_compression=True
    )
    try:
        client.connect()  # returns once every rank has registered
        for rank in range(n):
            # GetAliveTasks is a barrier among the *live* tasks of the set: no rank ever
            # joins this one, so it returns when ``rank`` has disconnected or died.
            while True:
                try:
                    if rank not in client.get_live_nodes([n, rank]):
                        break
                except Exception:
                    time.sleep(1.0)
    except Exception as e:  # a rank never came: the ranks' own connect() fails too
        print(f"coordinator: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        with contextlib.suppress(Exception):
            client.shutdown()
        service.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
