"""tensorplay-shaped namespaces: process groups and their collectives here; rpc, autograd,
nn, optim, algorithms (``Join``, DDP communication hooks), parallel
(``DistributedDataParallel``, served as ``tensorplay_jax.nn.parallel``) and device_mesh
(``DeviceMesh``, ``init_device_mesh``, also named here) as subpackages (imported on
first use).

The process-group names (``init_process_group``, the collectives, ``Work``...) are
``tensorplay_jax.process_group``'s ``__all__``, re-exported here; the collectives and
point-to-point calls in their tensorplay forms (``_inplace_collectives``): a Tensor is
filled in place and outputs come first (``dist.all_gather(tensor_list, t)``), while
``jax.Array`` inputs keep the JAX forms that return results. A group object has
c10d's methods (``pg.allreduce([t], opts)``, group ranks, a ``Work`` back:
``_group_methods``) and their options objects (``AllreduceOptions``, ...).

Example (one process per rank, e.g. started by ``python -m tensorplay_jax.run``):
  >>> import jax.numpy as jnp
  >>> import tensorplay_jax.distributed as dist
  >>> dist.init_process_group("gloo")  # doctest: +SKIP
  >>> y = dist.all_reduce(jnp.ones(4) * dist.get_rank())  # doctest: +SKIP
  >>> dist.destroy_process_group()  # doctest: +SKIP
"""

import importlib

from tensorplay_jax import process_group as _process_group
from tensorplay_jax.distributed import _group_methods, _group_options, _inplace_collectives
from tensorplay_jax.distributed._group_options import *  # noqa: F403
from tensorplay_jax.process_group import *  # noqa: F403  (process_group's __all__ is ours)

# The collectives again, in tensorplay's forms (Tensors in place) beside the JAX forms:
# these names replace process_group's.
globals().update(
    {name: getattr(_inplace_collectives, name) for name in _inplace_collectives.__all__}
)

_group_methods.attach()  # c10d's methods of the group object: ``pg.allreduce([t]).wait()``

_SUBPACKAGES = ("rpc", "autograd", "nn", "optim", "algorithms", "parallel", "device_mesh")


def __getattr__(name: str):
    # Subpackages load on first attribute access, so this package imports even while
    # (or where) one of them is absent; ``import tensorplay_jax.distributed.rpc`` works as usual.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "GradBucket":  # torch.distributed.GradBucket (DDP's communication hooks)
        return importlib.import_module(f"{__name__}.parallel").GradBucket
    if name in ("DeviceMesh", "init_device_mesh"):  # torch.distributed's, from device_mesh
        return getattr(importlib.import_module(f"{__name__}.device_mesh"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(
    dict.fromkeys([*_process_group.__all__, *_inplace_collectives.__all__, *_group_options.__all__])
)
