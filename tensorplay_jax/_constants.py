"""Timeouts, sizes and defaults shared across the package (tensorplay's defaults where it has them)."""

# RPC
DEFAULT_RPC_TIMEOUT_S: float = 60.0
DEFAULT_NUM_WORKER_THREADS: int = 16
DEFAULT_INIT_METHOD: str = "env://"

# Process groups
DEFAULT_PG_TIMEOUT_S: float = 300.0
