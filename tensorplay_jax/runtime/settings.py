"""Settings: timeouts, sizes and defaults, and every environment variable the package reads.

The constants below are the package's fixed values (tensorplay's where it has
them). :data:`SETTINGS` is the table of environment variables: each one's name,
default, type and meaning; the documentation's "Configuration" page is generated
from it (``docs/_ext/apigen.py``). Other modules read the environment only
through the accessors here (:func:`raw`, :func:`get_str`, :func:`get_int`,
:func:`get_float`, :func:`get_flag`, :func:`read`), which refuse a name that is
not in the table. Writing variables for child processes stays with the caller.

Example:
    >>> get_float("TENSORPLAY_JAX_SHM_SPIN_S", environ={})
    0.0001
    >>> get_str("TENSORPLAY_JAX_PG_ENGINE", environ={"TENSORPLAY_JAX_PG_ENGINE": "shm"})
    'shm'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping

# RPC
DEFAULT_RPC_TIMEOUT_S: float = 60.0
DEFAULT_NUM_WORKER_THREADS: int = 16
DEFAULT_INIT_METHOD: str = "env://"

# Process groups
DEFAULT_PG_TIMEOUT_S: float = 300.0
# Process-group internals (tensorplay_jax.process_group)
# The JAX coordinator listens on MASTER_PORT + this (the RPC store owns MASTER_PORT itself).
PG_COORDINATOR_PORT_OFFSET: int = 1
PG_MAX_NDIM: int = 16  # most dimensions a process-group collective accepts
PG_SHM_MIN_CAPACITY: int = 1 << 20  # smallest per-rank slot of the shared-memory engine (bytes)
PG_SHM_SMALL_BYTES: int = 1 << 20  # calls up to this per rank take the one-meeting path
PG_SHM_DEPTH: int = 8  # small-call buffer sets: a broadcast src runs up to DEPTH - 1 calls ahead
PG_SHM_SPIN_S: float = 100e-6  # yield-spin this long before sleeping on the futex
PG_SHM_MAX_SLEEP_S: float = 500e-6  # longest single sleep in a shared-memory wait
PG_LIVENESS_CHECK_S: float = 0.1  # how often a waiting rank checks that its peers' processes live
HOST_ALIGN: int = 64  # host buffers that become jax.Arrays (lets jax.device_put skip a copy)
# The coordination service declares a process dead after this long without a heartbeat:
# the group's timeout, clamped to [MIN, MAX] (MAX is JAX's default). A survivor never
# waits for it (see process_group/_coordinator.py); it bounds how long the coordinator
# process outlives a job whose last rank died.
PG_HEARTBEAT_MIN_S: int = 10
PG_HEARTBEAT_MAX_S: int = 100
PG_COORDINATOR_START_S: float = 30.0  # rank 0 waits this long for the coordinator to listen

# RPC transport (tensorplay_jax.rpc)
RPC_INIT_TIMEOUT_S: float = 120.0  # rendezvous: wait this long for every worker to register
RPC_SMALL_MESSAGE_BYTES: int = 1 << 20  # larger messages are streamed in chunks
RPC_CHUNK_BYTES: int = 4 << 20  # chunk size for large messages
RPC_BATCH_BYTES: int = 1 << 20  # small messages queued together are sent as one packet up to this
RPC_STORE_CONNECT_RETRY_S: float = 0.05  # pause between attempts to reach the rendezvous store
RPC_STORE_AUTH_TIMEOUT_S: float = 10.0  # a store connection must prove the secret within this
RPC_STORE_MAX_LINE: int = 1 << 20  # longest store request (bytes) an authenticated rank may send
RPC_STREAM_AUTH_WINDOW_S: float = 300.0  # a gRPC stream credential is fresh this long (clock skew)
RPC_STORE_ABORT_GRACE_S: float = 2.0  # rank 0 giving up: time for waiters to hear the cause
# rank 0 keeps the store up this long for the others to leave
RPC_SHUTDOWN_EXIT_WAIT_S: float = 10.0
# Graceful shutdown's default: no time limit (as tensorplay's) while every worker that has
# not arrived answers a ping, sent this often, each within PING_TIMEOUT.
RPC_SHUTDOWN_PING_EVERY_S: float = 5.0
RPC_SHUTDOWN_PING_TIMEOUT_S: float = 30.0
# Shutdown: a store reply may come this long after its wait ends or its deadline passed
# (a stopped or cut-off rank 0 costs this much, once).
RPC_STORE_REPLY_GRACE_S: float = 0.5
RPC_STORE_POLL_S: float = 0.05  # the store's server thread notices close() within this
# A wait on a file store (init_method="file://...", runtime.file_store) looks at the file
# again after MIN, doubling the pause up to MAX.
FILE_STORE_POLL_MIN_S: float = 0.005
FILE_STORE_POLL_MAX_S: float = 0.1
# Same-host links: a reader thread does each frame's work itself; a job running longer
# than DETACH gets reading handed to a spare thread (checked every CHECK while busy).
RPC_INLINE_DETACH_S: float = 0.01
RPC_INLINE_CHECK_S: float = 0.01
RPC_INLINE_PARK_S: float = 0.2  # the watchdog sleeps after this long with no frame
# Same-host links: before a reader sleeps in recvmsg it yield-spins (GIL released, in the
# optional C extension rpc/_spin.c) this long for the next frame;
# TENSORPLAY_JAX_RPC_SPIN_US overrides it, 0 turns spinning off.
RPC_SPIN_US: float = 1000.0
RPC_SERVER_STOP_GRACE_S: float = 1.0  # grpc server stop grace at shutdown
LAUNCH_KILL_GRACE_S: float = 5.0  # launcher: SIGTERM, then SIGKILL after this long


# ----------------------------------------------------------------- environment variables
SECRET_ENV = "TENSORPLAY_JAX_RPC_SECRET"
SECRET_FILE_ENV = "TENSORPLAY_JAX_RPC_SECRET_FILE"
INSECURE_ENV = "TENSORPLAY_JAX_RPC_INSECURE"
SPIN_US_ENV = "TENSORPLAY_JAX_RPC_SPIN_US"
LOCAL_TRANSPORT_ENV = "TENSORPLAY_JAX_RPC_LOCAL"
TCP_TRANSPORT_ENV = "TENSORPLAY_JAX_RPC_TCP"
TCP_LANES_ENV = "TENSORPLAY_JAX_RPC_TCP_LANES"
LOG_CALL_ERRORS_ENV = "TENSORPLAY_JAX_RPC_LOG_CALL_ERRORS"
X64_ENV = "JAX_ENABLE_X64"
PG_ENGINE_ENV = "TENSORPLAY_JAX_PG_ENGINE"
PG_COORDINATOR_LOG_ENV = "TENSORPLAY_JAX_PG_COORDINATOR_LOG"
SHM_SPIN_ENV = "TENSORPLAY_JAX_SHM_SPIN_S"
SHM_NO_FUTEX_ENV = "TENSORPLAY_JAX_SHM_NO_FUTEX"
LISTEN_ADDR_ENV = "TENSORPLAY_JAX_LISTEN_ADDR"
SOCKET_IFNAME_ENV = "TENSORPLAY_JAX_SOCKET_IFNAME"
LAUNCHED_NS_ENV = "TENSORPLAY_JAX_LAUNCHED_NS"
DEVICES_PER_WORKER_ENV = "TENSORPLAY_JAX_DEVICES_PER_WORKER"
LOCAL_DEVICES_ENV = "TENSORPLAY_JAX_LOCAL_DEVICES"
JOB_CACHE_ENV = "TENSORPLAY_JAX_JOB_COMPILATION_CACHE"
USER_CACHE_ENV = "TENSORPLAY_JAX_COMPILATION_CACHE"
CACHE_DIR_ENV = "TENSORPLAY_JAX_CACHE_DIR"
USER_CACHE_MAX_MB_ENV = "TENSORPLAY_JAX_COMPILATION_CACHE_MAX_MB"
XDG_CACHE_ENV = "XDG_CACHE_HOME"
XLA_DEFAULTS_ENV = "TENSORPLAY_JAX_XLA_DEFAULTS"
HOST_EAGER_MAX_ENV = "TENSORPLAY_JAX_HOST_EAGER_MAX"
JAX_CACHE_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
JAX_CACHE_ENABLE_ENV = "JAX_ENABLE_COMPILATION_CACHE"
JAX_CACHE_MIN_COMPILE_S_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
JAX_CACHE_MIN_ENTRY_ENV = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
SLURM_VARS = (
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default (as text; None: unset), type and meaning."""

    env: str
    default: str | None
    type: type
    doc: str


SETTINGS: tuple[Setting, ...] = (
    # rendezvous and launch (runtime.init_method, runtime.launch)
    Setting("MASTER_ADDR", None, str, "rendezvous host (rank 0's store); env:// reads it"),
    Setting(
        "MASTER_PORT",
        None,
        int,
        "rendezvous port: the RPC store listens on it, the process-group coordinator on "
        f"it + {PG_COORDINATOR_PORT_OFFSET}",
    ),
    Setting("RANK", None, int, "this process's rank when none is passed"),
    Setting("WORLD_SIZE", None, int, "number of processes when none is passed"),
    Setting("LOCAL_RANK", None, int, "rank on this node; picks the GPU of an nccl group"),
    Setting(
        "LOCAL_WORLD_SIZE",
        None,
        int,
        "processes on this node; fewer than WORLD_SIZE means the job spans hosts",
    ),
    Setting(
        DEVICES_PER_WORKER_ENV,
        "auto",
        str,
        "GPUs the launcher, spawn and testing.Workers give each local worker: auto (one "
        "each, shared when there are fewer), 0 (every worker sees every GPU) or a number",
    ),
    Setting(
        LOCAL_DEVICES_ENV,
        None,
        str,
        "set by the launcher: the GPUs this worker was given (CUDA_VISIBLE_DEVICES's values)",
    ),
    # addresses of a job that spans hosts (runtime.address)
    Setting(
        LISTEN_ADDR_ENV,
        None,
        str,
        "the address this worker binds and advertises (RPC, gloo); default: see "
        "'Running on several hosts'",
    ),
    Setting(
        SOCKET_IFNAME_ENV,
        None,
        str,
        "the interface (e.g. eth0) whose address this worker binds and advertises",
    ),
    Setting("GLOO_SOCKET_IFNAME", None, str, f"as {SOCKET_IFNAME_ENV} (torch's name)"),
    Setting("SLURM_PROCID", None, int, "SLURM: RANK when RANK is unset"),
    Setting("SLURM_NTASKS", None, int, "SLURM: WORLD_SIZE when WORLD_SIZE is unset"),
    Setting("SLURM_LOCALID", None, int, "SLURM: LOCAL_RANK when LOCAL_RANK is unset"),
    Setting("SLURM_JOB_NODELIST", None, str, "SLURM: MASTER_ADDR is its first host"),
    Setting("SLURM_NODELIST", None, str, "SLURM: as SLURM_JOB_NODELIST (older name)"),
    Setting("SLURM_JOB_ID", None, int, "SLURM: MASTER_PORT is 20000 + id % 20000"),
    Setting("SLURM_NNODES", "1", int, "SLURM: the launcher's --nnodes default"),
    Setting("SLURM_NODEID", "0", int, "SLURM: the launcher's --node-rank default"),
    Setting("SLURM_NTASKS_PER_NODE", "1", str, "SLURM: the launcher's --nproc default"),
    Setting(
        "PYTHONPATH", None, str, "rpc.spawn puts the package's root in front of it for its workers"
    ),
    Setting(
        LAUNCHED_NS_ENV,
        None,
        int,
        "set by the launcher (tensorplay_jax.run, rpc.spawn): when it started this worker "
        "(ns since the epoch), for the profiler's start-up phases",
    ),
    # the compiler options of our own programs (runtime.xla_options)
    Setting(
        XLA_DEFAULTS_ENV,
        "0",
        bool,
        "1: tensorplay_jax's own programs (the tape's, the optimizers', the draws') compile with "
        "XLA's default options; 0: with runtime.xla_options.compiler_options() (on jaxlib 0.10, "
        "XLA's CPU loop emitter instead of its slower-compiling fusion emitters)",
    ),
    # operations on small CPU arrays run with NumPy (autograd.speedups._host_eval)
    Setting(
        HOST_EAGER_MAX_ENV,
        "4096",
        int,
        "on the CPU backend, while the tape's speed-up layer is on (autograd.set_deferred), a "
        "call whose inputs hold at most this many values runs with NumPy instead of compiling "
        "a program for each new input shape, when its primitives are arithmetic, comparisons, "
        "reductions or shape operations: an unrecorded operation's forward, a recorded one's "
        "forward-with-VJP, a node's pullback in the backward and a sum of two gradients; "
        "0 turns this off",
    ),
    # the user's and the job's compilation caches (runtime.compile_cache)
    Setting(
        USER_CACHE_ENV,
        "1",
        str,
        "1: a process that imports tensorplay_jax keeps JAX's compiled programs in a "
        f"per-user cache under {CACHE_DIR_ENV}, so a rerun loads them instead of compiling; "
        f"0: off (the launchers' job cache, {JOB_CACHE_ENV}, then shares one job's programs). "
        f"Unused when {'JAX_COMPILATION_CACHE_DIR'} is set or JAX's config names a directory",
    ),
    Setting(
        CACHE_DIR_ENV,
        None,
        str,
        f"where the per-user cache lives (default: ${XDG_CACHE_ENV}/tensorplay_jax, or "
        "~/.cache/tensorplay_jax); one subdirectory per jax/jaxlib version and XLA flags",
    ),
    Setting(
        USER_CACHE_MAX_MB_ENV,
        "1024",
        int,
        "the per-user cache's size bound in MiB: past it, the least recently used entries "
        "(of every version's subdirectory) are removed when a process starts",
    ),
    Setting(XDG_CACHE_ENV, None, str, "the XDG base directory for caches (~/.cache when unset)"),
    Setting(
        JOB_CACHE_ENV,
        "1",
        str,
        "1: rpc.spawn and tensorplay_jax.run give their workers one JAX compilation cache "
        "directory (made by the launching process, removed when it exits), so a program one "
        f"worker compiled is loaded by the others; 0: off. Unused when {JAX_CACHE_DIR_ENV} is set",
    ),
    Setting(
        JAX_CACHE_DIR_ENV,
        None,
        str,
        "JAX's persistent compilation cache directory; when set, the launchers leave caching to it",
    ),
    Setting(
        JAX_CACHE_ENABLE_ENV,
        "true",
        str,
        "JAX's; false turns its persistent cache off, and the launchers' job cache with it",
    ),
    Setting(
        JAX_CACHE_MIN_COMPILE_S_ENV,
        "1.0",
        float,
        "JAX's; programs compiled faster are not cached (the launchers' job cache: 0 unless set)",
    ),
    Setting(
        JAX_CACHE_MIN_ENTRY_ENV,
        "0",
        int,
        "JAX's; smaller cache entries are not written (the launchers' job cache: 0 unless set)",
    ),
    # the job secret (runtime.secret)
    Setting(SECRET_ENV, None, str, "the job secret every connection proves; never empty"),
    Setting(SECRET_FILE_ENV, None, str, "a file (mode 600) holding the job secret"),
    Setting(INSECURE_ENV, "0", bool, "1/true/yes/on: run a job with no secret, unauthenticated"),
    Setting(
        "XDG_CONFIG_HOME",
        "~/.config",
        str,
        "the per-user secret of same-host jobs is $XDG_CONFIG_HOME/tensorplay_jax/rpc_secret",
    ),
    # RPC transport (rpc)
    Setting(
        LOCAL_TRANSPORT_ENV,
        "1",
        str,
        "0 turns the same-host socket transport off (peers here are reached as other hosts are)",
    ),
    Setting(TCP_TRANSPORT_ENV, "1", str, "0 keeps RPC between hosts on gRPC (no plain TCP link)"),
    Setting(
        TCP_LANES_ENV,
        "3",
        int,
        "TCP connections per link between hosts (1-8); a long message is split over them",
    ),
    Setting(
        LOG_CALL_ERRORS_ENV,
        "1",
        bool,
        "0 stops a callee printing, as tensorplay's does, a called function's error to stderr",
    ),
    Setting(
        SPIN_US_ENV,
        f"{RPC_SPIN_US:g}",
        float,
        "microseconds a same-host reader spins before it sleeps; 0 never spins",
    ),
    # process groups (distributed)
    Setting(
        PG_ENGINE_ENV,
        "auto",
        str,
        "default engine of init_process_group: auto, shm, tcp, xla or a registered one",
    ),
    Setting(PG_COORDINATOR_LOG_ENV, None, str, "a file for the coordination service's own log"),
    Setting(
        SHM_SPIN_ENV,
        f"{PG_SHM_SPIN_S:g}",
        float,
        "seconds a shared-memory wait yield-spins before it sleeps",
    ),
    Setting(
        SHM_NO_FUTEX_ENV,
        None,
        str,
        "set (non-empty): shared-memory waits sleep in steps instead of on a futex",
    ),
    Setting("JAX_PLATFORMS", None, str, "JAX's; without cuda/gpu/rocm the default backend is gloo"),
    Setting(
        X64_ENV,
        None,
        bool,
        "JAX's; 1 turns 64-bit types on (tp.float64, .double(), float64 NumPy data); without "
        "it asking for float64 raises (see docs/porting.md)",
    ),
    Setting(
        "JAX_COORDINATOR_BIND_ADDRESS",
        None,
        str,
        "JAX's; where the coordination service listens (default: loopback for a loopback "
        "MASTER_ADDR, else every interface)",
    ),
    Setting(
        "XLA_FLAGS",
        None,
        str,
        "XLA's; init_process_group adds --xla_cpu_collective_timeout_seconds unless given; "
        "the per-user compilation cache keeps one subdirectory per value",
    ),
)

_BY_ENV: dict[str, Setting] = {s.env: s for s in SETTINGS}
_TRUE = ("1", "true", "yes", "on")


def setting(env: str) -> Setting:
    """The table row of ``env``.

    Raises:
      KeyError: ``env`` is not in :data:`SETTINGS` (add a row for it).

    Example:
        >>> setting("TENSORPLAY_JAX_PG_ENGINE").default
        'auto'
    """
    try:
        return _BY_ENV[env]
    except KeyError:
        raise KeyError(
            f"settings: {env!r} is not in tensorplay_jax.runtime.settings.SETTINGS; add a "
            "Setting row for it (the documentation's Configuration table is made from them)"
        ) from None


def raw(env: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's text as set, or None when unset (no default applied).

    Example:
        >>> raw("MASTER_ADDR", environ={"MASTER_ADDR": "node0"})
        'node0'
    """
    setting(env)
    return (os.environ if environ is None else environ).get(env)


def read(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``names`` that are set, as a dict.

    Example:
        >>> read(["RANK", "WORLD_SIZE"], environ={"RANK": "1"})
        {'RANK': '1'}
    """
    out = {}
    for name in names:
        v = raw(name, environ)
        if v is not None:
            out[name] = v
    return out


def get_str(env: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's text, or its default when unset or empty.

    Example:
        >>> get_str("SLURM_NNODES", environ={})
        '1'
    """
    v = raw(env, environ)
    return v if v else _BY_ENV[env].default


def get_int(env: str, environ: Mapping[str, str] | None = None) -> int | None:
    """The variable as an int (its default when unset or empty; None without one).

    Example:
        >>> get_int("SLURM_NODEID", environ={"SLURM_NODEID": "3"})
        3
    """
    v = get_str(env, environ)
    return None if v is None else int(v)


def get_float(env: str, environ: Mapping[str, str] | None = None) -> float | None:
    """The variable as a float (its default when unset or empty; None without one).

    Raises:
      ValueError: the text is not a number.

    Example:
        >>> get_float("TENSORPLAY_JAX_RPC_SPIN_US", environ={"TENSORPLAY_JAX_RPC_SPIN_US": "0"})
        0.0
    """
    v = get_str(env, environ)
    return None if v is None else float(v)


def get_flag(env: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when the variable says 1, true, yes or on (any case, spaces ignored).

    Example:
        >>> get_flag("TENSORPLAY_JAX_RPC_INSECURE", environ={"TENSORPLAY_JAX_RPC_INSECURE": "Yes"})
        True
    """
    return (raw(env, environ) or "").strip().lower() in _TRUE
