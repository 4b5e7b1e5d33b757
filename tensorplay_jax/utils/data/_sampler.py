"""Samplers: the order in which ``DataLoader`` reads a map-style dataset's indices
(``SequentialSampler``, ``RandomSampler``, ``SubsetRandomSampler``) and how it groups
them (``BatchSampler``), as torch's."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any

from tensorplay_jax.tensors import Generator, randint, randperm

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler", "SubsetRandomSampler"]


class Sampler:
    """Iterates over indices of a dataset; a subclass defines ``__iter__`` (and ``__len__``)."""

    def __init__(self, data_source: Any = None) -> None:
        del data_source

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (``replacement``: ``num_samples`` draws with
    replacement), from tensorplay_jax's random state or ``generator``.

    Example:
        >>> import tensorplay_jax as tp
        >>> sorted(RandomSampler(range(4), generator=tp.Generator().manual_seed(1)))
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got {replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got {self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        """How many indices an iteration gives (the dataset's length unless given)."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.replacement:
            yield from randint(0, n, (self.num_samples,), generator=self.generator).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=self.generator).tolist()
        yield from randperm(n, generator=self.generator).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last shorter unless
    ``drop_last``).

    Example:
        >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
