"""``tensorplay_jax.distributed.algorithms``: ``Join`` (uneven inputs), the DDP
communication hooks (``ddp_comm_hooks``) and ``model_averaging``, as in
``torch.distributed.algorithms``."""

from tensorplay_jax.distributed.algorithms import ddp_comm_hooks as ddp_comm_hooks
from tensorplay_jax.distributed.algorithms import model_averaging as model_averaging
from tensorplay_jax.distributed.algorithms.join import Join as Join
from tensorplay_jax.distributed.algorithms.join import Joinable as Joinable
from tensorplay_jax.distributed.algorithms.join import JoinHook as JoinHook

__all__ = ["Join", "JoinHook", "Joinable", "ddp_comm_hooks", "model_averaging"]
