"""Datasets: ``Dataset`` (map-style: ``__getitem__`` and ``__len__``), ``IterableDataset``,
``TensorDataset``, ``Subset``, ``ConcatDataset`` and ``random_split``, as torch's."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from typing import Any

from tensorplay_jax.tensors import Generator, Tensor, randperm

__all__ = ["ConcatDataset", "Dataset", "IterableDataset", "Subset", "TensorDataset", "random_split"]


class Dataset:
    """A map-style dataset: ``dataset[i]`` is sample ``i``; a subclass defines
    ``__getitem__`` (and ``__len__`` for the samplers that need a length). ``a + b``
    concatenates."""

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: a subclass defines ``__iter__`` (``DataLoader`` batches
    what it yields, in order; samplers do not apply)."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; every Tensor has the same first
    dimension.

    Example:
        >>> import tensorplay_jax as tp
        >>> ds = TensorDataset(tp.arange(3), tp.arange(3) * 10)
        >>> len(ds), [int(v) for v in ds[2]]
        (3, [2, 20])
    """

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one Tensor")
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ValueError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)  # type: ignore[arg-type]
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> Any:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[d - 1] if d else 0
        return self.datasets[d][idx - start]


def random_split(
    dataset: Dataset, lengths: Sequence[int | float], generator: Generator | None = None
) -> list[Subset]:
    """``dataset`` split into non-overlapping random ``Subset`` s of the given lengths (or
    fractions summing to 1: each gets the floor of its share, the remainder one by one
    from the first, as torch's).

    Example:
        >>> import tensorplay_jax as tp
        >>> a, b = random_split(range(10), [0.7, 0.3], generator=tp.Generator().manual_seed(0))
        >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
        (7, 3, True)
    """
    n = len(dataset)  # type: ignore[arg-type]
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [math.floor(n * frac) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = randperm(n, generator=generator).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start : start + int(length)]))
        start += int(length)
    return out
