"""Worker code for tests/utils/test_data.py: a DistributedSampler in a real process group."""

from __future__ import annotations

import tensorplay_jax.distributed as dist
from tensorplay_jax.utils.data import DataLoader, TensorDataset
from tensorplay_jax.utils.data.distributed import DistributedSampler
from tests._worker import hand_back


def sampler_from_the_group() -> None:
    """Each rank's indices for epochs 0 and 1 and its first batch, with ``num_replicas``
    and ``rank`` left to the process group."""
    import tensorplay_jax as tp

    dist.init_process_group("gloo", timeout=30)
    ds = TensorDataset(tp.arange(10))
    sampler = DistributedSampler(ds, seed=3)
    got = {"rank": dist.get_rank(), "world": sampler.num_replicas, "epoch0": list(sampler)}
    sampler.set_epoch(1)
    got["epoch1"] = list(sampler)
    got["batch"] = next(iter(DataLoader(ds, batch_size=2, sampler=sampler)))[0].tolist()
    dist.destroy_process_group()
    hand_back(got)
