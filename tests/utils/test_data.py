"""``tensorplay_jax.utils.data``: batches, collation, samplers and ``DistributedSampler``.

Expected values are torch 2.13's for the same calls, written out, where the behaviour is
deterministic; shuffles (tensorplay_jax's random state, not torch's generator) are checked
by their invariants."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    random_split,
)
from tensorplay_jax.utils.data.distributed import DistributedSampler
from tests._procs import run_and_collect
from tests.utils import _data_workers as W


def test_batches_of_a_tensor_dataset_in_order_with_and_without_the_last_short_one():
    ds = TensorDataset(tp.arange(10.0).reshape(5, 2), tp.arange(5))
    xs, ys = zip(*DataLoader(ds, batch_size=2), strict=True)
    assert [tuple(x.shape) for x in xs] == [(2, 2), (2, 2), (1, 2)]
    assert [y.tolist() for y in ys] == [[0, 1], [2, 3], [4]]
    assert len(DataLoader(range(10), batch_size=3)) == 4  # torch's lengths
    assert len(DataLoader(range(10), batch_size=3, drop_last=True)) == 3
    assert [b.tolist() for b in DataLoader(range(5), batch_size=2, drop_last=True)] == [
        [0, 1],
        [2, 3],
    ]


def test_default_collate_follows_torchs_rules_for_each_kind_of_field():
    Pair = namedtuple("Pair", "a b")
    sample = (tp.ones(2), 1, "a", {"k": 2.5}, np.ones(3, np.float32), Pair(1.0, 2))
    batch = next(iter(DataLoader([sample] * 3, batch_size=3)))
    assert type(batch) is list  # torch: a tuple's fields come back as a list
    t, i, s, d, a, p = batch
    assert t.shape == (3, 2) and i.tolist() == [1, 1, 1] and i.dtype.kind == "i"
    assert s == ("a", "a", "a")  # strings as given (a tuple inside a sample)
    assert d["k"].tolist() == [2.5, 2.5, 2.5]
    assert isinstance(a, tp.Tensor) and a.shape == (3, 3) and a.dtype == np.float32
    assert type(p) is Pair and p.a.tolist() == [1.0, 1.0, 1.0] and p.b.tolist() == [2, 2, 2]
    with pytest.raises(RuntimeError, match="equal size"):
        next(iter(DataLoader([[1, 2], [3]], batch_size=2)))


def test_batch_size_none_converts_samples_one_by_one():
    (first,) = [next(iter(DataLoader([(np.ones(2, np.float32), 3)] * 2, batch_size=None)))]
    assert type(first) is list and isinstance(first[0], tp.Tensor) and first[1] == 3


def test_shuffle_gives_a_new_permutation_each_epoch_reproducibly_by_seed():
    def two_epochs(seed):
        tp.manual_seed(seed)
        loader = DataLoader(range(20), batch_size=20, shuffle=True)
        return [next(iter(loader)).tolist() for _ in range(2)]

    first, second = two_epochs(5)
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second and first != list(range(20))
    assert two_epochs(5) == [first, second]
    g = tp.Generator().manual_seed(1)
    assert sorted(RandomSampler(range(7), generator=g)) == list(range(7))
    draws = list(RandomSampler(range(3), replacement=True, num_samples=50))
    assert len(draws) == 50 and set(draws) <= {0, 1, 2}


def test_samplers_subsets_and_concatenation():
    assert list(BatchSampler(SequentialSampler(range(5)), 2, drop_last=False)) == [
        [0, 1],
        [2, 3],
        [4],
    ]
    assert len(BatchSampler(range(5), 2, drop_last=True)) == 2
    sub = Subset(list("abcdef"), [4, 0])
    assert (len(sub), sub[0], sub[1]) == (2, "e", "a")
    cat = ConcatDataset([range(3), range(10, 12)])
    assert (len(cat), cat[3], cat[-1]) == (5, 10, 11)


@pytest.mark.parametrize(
    ("lengths", "sizes"),  # torch's sizes for a dataset of 11
    [
        ([0.7, 0.3], [8, 3]),
        ([0.33, 0.33, 0.34], [4, 4, 3]),
        ([0.5, 0.5], [6, 5]),
        ([0.1, 0.2, 0.3, 0.4], [2, 2, 3, 4]),
        ([5, 6], [5, 6]),
    ],
)
def test_random_split_sizes_are_torchs_and_the_parts_partition_the_dataset(lengths, sizes):
    parts = random_split(range(11), lengths, generator=tp.Generator().manual_seed(0))
    assert [len(p) for p in parts] == sizes
    assert sorted(i for p in parts for i in p) == list(range(11))


@pytest.mark.parametrize(
    ("n", "replicas", "drop_last", "shares"),  # torch's, unshuffled
    [
        (10, 3, False, [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]),
        (10, 3, True, [[0, 3, 6], [1, 4, 7], [2, 5, 8]]),
        (2, 5, False, [[0], [1], [0], [1], [0]]),
        (7, 2, True, [[0, 2, 4], [1, 3, 5]]),
    ],
)
def test_distributed_sampler_shares_are_torchs(n, replicas, drop_last, shares):
    got = [
        DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last)
        for r in range(replicas)
    ]
    assert [list(s) for s in got] == shares
    assert [len(s) for s in got] == [len(s) for s in shares]


def test_distributed_sampler_shuffles_one_permutation_for_all_ranks_per_epoch():
    def shares(epoch):
        out = []
        for r in range(4):
            s = DistributedSampler(range(12), num_replicas=4, rank=r, seed=7)
            s.set_epoch(epoch)
            out.append(list(s))
        return out

    first, again, later = shares(0), shares(0), shares(1)
    assert first == again  # the same seed and epoch give every rank the same permutation
    assert sorted(i for share in first for i in share) == list(range(12))  # a partition
    assert first != later and sorted(i for share in later for i in share) == list(range(12))


def test_bad_arguments_raise_torchs_errors():
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(range(3), sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(range(3), batch_size=2, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="non-negative"):
        DataLoader(range(3), num_workers=-1)
    with pytest.raises(
        ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"
    ):
        DistributedSampler(range(3), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(range(3))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(range(5), [2, 2])


def test_an_iterable_dataset_is_batched_in_the_order_it_yields():
    class Counter(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Counter(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Counter(), shuffle=True)


def test_ranks_of_a_process_group_read_disjoint_shares_without_naming_their_rank(tmp_path):
    got = run_and_collect(W.sampler_from_the_group, 2, tmp_path, timeout=120)
    assert [g["rank"] for g in got] == [0, 1] and {g["world"] for g in got} == {2}
    for epoch in ("epoch0", "epoch1"):
        shares = [g[epoch] for g in got]
        assert sorted(shares[0] + shares[1]) == list(range(10))
        for r, share in enumerate(shares):  # what the same sampler gives with its rank named
            named = DistributedSampler(range(10), num_replicas=2, rank=r, seed=3)
            named.set_epoch(int(epoch[-1]))
            assert share == list(named)
    assert [g["batch"] for g in got] == [g["epoch1"][:2] for g in got]  # the sampler's epoch
