"""What the launcher told this process: its rank on the node, and whether a launcher ran it.

tensorplay scripts ask these before ``init_process_group`` (which device to take,
whether to start workers themselves): ``get_node_local_rank`` reads ``LOCAL_RANK``
(set by ``python -m tensorplay_jax.run``, torchrun, or SLURM's ``SLURM_LOCALID``), and
``is_torchelastic_launched`` is true under a launcher that sets
``TORCHELASTIC_RUN_ID`` (torchrun, and ``python -m tensorplay_jax.run``).

Example:
  >>> get_node_local_rank(fallback_rank=0) >= 0
  True
"""

from __future__ import annotations

import os

from tensorplay_jax.runtime.init_method import local_rank

__all__ = ["get_node_local_rank", "is_torchelastic_launched"]


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """This process's rank on its node: ``LOCAL_RANK`` (or SLURM's), else ``fallback_rank``.

    Raises:
      RuntimeError: neither is there (tensorplay's words).

    Example:
      >>> get_node_local_rank(fallback_rank=3) >= 0
      True
    """
    rank = local_rank()
    if rank is not None:
        return rank
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError(
        "LOCAL_RANK is not in the environment. Consider passing fallback_rank to allow "
        "`get_node_local_rank` to work, assuming you are not running in a multi-device "
        "context and want the code to run locally instead."
    )


def is_torchelastic_launched() -> bool:
    """Whether a launcher that sets ``TORCHELASTIC_RUN_ID`` started this process
    (torchrun; ``python -m tensorplay_jax.run`` sets it too).

    Example:
      >>> isinstance(is_torchelastic_launched(), bool)
      True
    """
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None
