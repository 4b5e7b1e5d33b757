"""The seed example of issue 4 as written, RPC-not-initialized errors.

The docstring examples run in ``tests/test_doctests.py``."""

from __future__ import annotations

from tests.distributed.autograd import _workers as W


def test_seed_example_one_worker(workers):
    out = workers(W.seed, 1, timeout=120)
    assert "tensor([2., 2., 2., 2.])" in out[0].stdout, out[0]


def test_seed_example_three_workers(workers):
    out = workers(W.seed_multi, 3, timeout=120)
    assert "tensor([4., 4., 4., 4.])" in out[0].stdout, out[0]
