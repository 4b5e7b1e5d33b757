"""Timeouts, sizes and defaults shared across the package (tensorplay's where it has them)."""

# RPC
DEFAULT_RPC_TIMEOUT_S: float = 60.0
DEFAULT_NUM_WORKER_THREADS: int = 16
DEFAULT_INIT_METHOD: str = "env://"

# Process groups
DEFAULT_PG_TIMEOUT_S: float = 300.0
# Process-group internals (tensorplay_jax.distributed)
# The JAX coordinator listens on MASTER_PORT + this (the RPC store owns MASTER_PORT itself).
PG_COORDINATOR_PORT_OFFSET: int = 1
PG_MAX_NDIM: int = 16  # most dimensions a process-group collective accepts
PG_SHM_MIN_CAPACITY: int = 1 << 20  # smallest per-rank slot of the shared-memory engine (bytes)
PG_SHM_SMALL_BYTES: int = 1 << 20  # calls up to this per rank take the one-meeting path
PG_SHM_DEPTH: int = 8  # small-call buffer sets: a broadcast src runs up to DEPTH - 1 calls ahead
PG_SHM_SPIN_S: float = 100e-6  # yield-spin this long before sleeping on the futex
PG_SHM_MAX_SLEEP_S: float = 500e-6  # longest single sleep in a shared-memory wait
PG_LIVENESS_CHECK_S: float = 0.1  # how often a waiting rank checks that its peers' processes live
PG_ALIGN: int = 64  # byte alignment of result buffers (lets jax.device_put skip a copy)
# The coordination service declares a process dead after this long without a heartbeat:
# the group's timeout, clamped to [MIN, MAX] (MAX is JAX's default). A survivor never
# waits for it (see distributed/_pg/coordinator.py); it bounds how long the coordinator
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
# Graceful shutdown's default bound, all phases included (tensorplay's: its RPC timeout).
RPC_SHUTDOWN_TIMEOUT_S: float = 60.0
# Shutdown: a store reply may come this long after its wait ends or its deadline passed
# (a stopped or cut-off rank 0 costs this much, once).
RPC_STORE_REPLY_GRACE_S: float = 0.5
RPC_STORE_POLL_S: float = 0.05  # the store's server thread notices close() within this
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
