"""``DataLoader``: batches of a dataset, in the order of a sampler, collated into Tensors.

Samples are loaded in the calling process. ``num_workers > 0`` is accepted, so ported
code runs as written, and loads there too: worker processes would be forks of a process
whose JAX runtime is multi-threaded (JAX warns that a fork may deadlock), and the
batches' arrays belong to the process that uses them (``docs/porting.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tensorplay_jax.tensors import Generator
from tensorplay_jax.utils.data._collate import default_collate, default_convert
from tensorplay_jax.utils.data._dataset import IterableDataset
from tensorplay_jax.utils.data._sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

__all__ = ["DataLoader"]


class DataLoader:
    """Iterate over ``dataset`` in batches (torch's arguments).

    Args:
        dataset: a map-style ``Dataset`` (any object with ``__getitem__`` and ``__len__``)
            or an ``IterableDataset``.
        batch_size: samples per batch (None: samples one by one, not collated).
        shuffle: a new random order each epoch (``RandomSampler``).
        sampler: the order of indices instead (not with ``shuffle``).
        batch_sampler: lists of indices per batch instead (not with ``batch_size``,
            ``shuffle``, ``sampler`` or ``drop_last``).
        num_workers: accepted; samples are loaded in this process.
        collate_fn: a list of samples to a batch (``default_collate``).
        drop_last: drop a last, shorter batch.
        generator: the ``tp.Generator`` that ``shuffle`` draws from.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.utils.data import DataLoader, TensorDataset
        >>> loader = DataLoader(TensorDataset(tp.arange(10)), batch_size=4, drop_last=True)
        >>> len(loader), [b[0].tolist() for b in loader]
        (2, [[0, 1, 2, 3], [4, 5, 6, 7]])
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable[Any] | None = None,
        batch_sampler: Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; use num_workers=0 to disable "
                "multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor "
                "to None."
            )
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.num_workers, self.drop_last = dataset, num_workers, drop_last
        self.pin_memory, self.timeout, self.generator = pin_memory, timeout, generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None or batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler and "
                    "batch_sampler options"
                )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with "
                "drop_last"
            )
        if sampler is None and not self._iterable:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else (SequentialSampler(dataset))
            )
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore[arg-type]
        self.batch_size, self.sampler, self.batch_sampler = batch_size, sampler, batch_sampler
        auto = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if auto else default_convert)

    def __iter__(self) -> Iterator[Any]:
        if self._iterable:
            yield from self._iterate_stream()
            return
        if self.batch_sampler is not None:
            for indices in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in indices])
            return
        for i in self.sampler:  # type: ignore[union-attr]
            yield self.collate_fn(self.dataset[i])

    def _iterate_stream(self) -> Iterator[Any]:
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch: list[Any] = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # a stream with a length: its batches
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        return len(self.sampler)  # type: ignore[arg-type]
