"""``DistributedSampler``: each rank of a data-parallel job reads its own share of a
dataset, torch's ``torch.utils.data.distributed.DistributedSampler``.

The indices (shuffled with ``seed + epoch``, the same permutation on every rank) are
padded by repeating the first ones until ``num_replicas`` divides them (or the tail is
dropped, ``drop_last``), and rank ``r`` takes every ``num_replicas``-th from ``r``: the
ranks' shares are equal in size and together cover the dataset. Call ``set_epoch`` at
the start of each epoch for a new order. ``num_replicas`` and ``rank`` default to the
process group's.

Example:
    >>> s = DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False)
    >>> list(s), len(s)
    ([1, 4, 7, 0], 4)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

from tensorplay_jax.tensors import Generator, randperm
from tensorplay_jax.utils.data._sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """The indices of ``dataset`` that rank ``rank`` of ``num_replicas`` reads (see the
    module docstring).

    Raises:
        ValueError: ``rank`` outside ``[0, num_replicas - 1]``, or ``num_replicas`` or
            ``rank`` not given and no process group.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            from tensorplay_jax import process_group

            if not process_group.is_initialized():
                raise ValueError(
                    "DistributedSampler: num_replicas and rank come from the process group, "
                    "and there is none; call init_process_group first or pass both"
                )
            num_replicas = process_group.get_world_size() if num_replicas is None else num_replicas
            rank = process_group.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Shuffle with ``seed + epoch`` from now on (call it at each epoch's start)."""
        self.epoch = epoch
