"""In-place methods and view semantics: each program runs on tensorplay and, when present, torch.

Each ``prog_*`` takes the library module (``tensorplay_jax`` or ``torch``; the
API is the same) and returns plain lists. Expected values are written by hand;
where torch is importable the same program runs on torch and must agree too.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _check(prog, expected):
    got = prog(tp)
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=1e-6)
    torch = _torch()
    if torch is not None:
        np.testing.assert_allclose(np.asarray(prog(torch), np.float64), expected, rtol=1e-6)


def prog_slice_write(lib):
    r = lib.zeros(4)
    c = r[1:3]
    c[0] = 5.0
    return r.tolist()


def prog_base_write_seen_by_view(lib):
    r = lib.zeros(4)
    c = r[1:3]
    r[2] = 7.0
    return c.tolist()


def prog_view_of_view(lib):
    r = lib.zeros(2, 4)
    row = r[1]
    tail = row[2:]
    tail.fill_(3.0)
    return r.tolist()


def prog_view_reshape_transpose(lib):
    x = lib.arange(6).float()
    x.view(2, 3)[1, 1] = 100.0
    x.view(3, 2).t()[0, 2] = -1.0
    return x.tolist()


def prog_iteration_rows_write(lib):
    x = lib.zeros(3, 2)
    for i, row in enumerate(x):
        row.add_(i)
    return x.tolist()


def prog_returns_loop(lib):
    # the RL tutorials' discounted returns, written into a slice of a buffer
    rewards = [1.0, 0.0, 2.0]
    buf = lib.zeros(5)
    view = buf[1:4]
    ret = 0.0
    for t in reversed(range(3)):
        ret = rewards[t] + 0.5 * ret
        view[t] = ret
    return buf.tolist()


def prog_detach_shares(lib):
    x = lib.ones(3)
    x.detach().mul_(4.0)
    x.data.add_(1.0)
    return x.tolist()


@pytest.mark.parametrize(
    "prog, expected",
    [
        (prog_slice_write, [0, 5, 0, 0]),
        (prog_base_write_seen_by_view, [0, 7]),
        (prog_view_of_view, [[0, 0, 0, 0], [0, 0, 3, 3]]),
        (prog_view_reshape_transpose, [0, 1, 2, 3, -1, 5]),
        (prog_iteration_rows_write, [[0, 0], [1, 1], [2, 2]]),
        (prog_returns_loop, [0, 1.5, 1.0, 2.0, 0]),
        (prog_detach_shares, [5, 5, 5]),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_writes_reach_base_and_views(prog, expected):
    _check(prog, expected)


def test_a_cast_to_its_own_dtype_is_the_tensor_itself():
    # torch: t.float() of a float32 Tensor returns t (a write through it is a write to t)
    for lib in filter(None, (tp, _torch())):
        x = lib.zeros(3)
        assert x.float() is x, lib.__name__
        x.float()[1] = 2.0
        assert x.tolist() == [0.0, 2.0, 0.0], lib.__name__
        i = lib.arange(3).int()
        assert i.int() is i and i.float() is not i, lib.__name__
        assert i.float().dtype == lib.float32 and i.tolist() == [0, 1, 2], lib.__name__


def prog_inplace_methods(lib):
    x = lib.tensor([[1.0, -2.0], [3.0, 4.0]])
    out = []
    out += x.clone().add_(1.0, alpha=2.0).flatten().tolist()
    out += x.clone().sub_(x).flatten().tolist()
    out += x.clone().mul_(x).flatten().tolist()
    out += x.clone().div_(2.0).flatten().tolist()
    out += x.clone().clamp_(-1.0, 2.0).flatten().tolist()
    out += x.clone().zero_().flatten().tolist()
    out += x.clone().fill_(7.0).flatten().tolist()
    out += x.clone().copy_(lib.tensor([9.0, 8.0])).flatten().tolist()
    out += x.clone().masked_fill_(x < 0, 0.5).flatten().tolist()
    out += x.clone().addcmul_(x, x, value=0.5).flatten().tolist()
    out += x.clone().lerp_(lib.zeros(2, 2), 0.25).flatten().tolist()
    return out


def test_inplace_methods_match_torch():
    x = np.array([[1.0, -2.0], [3.0, 4.0]])
    expected = np.concatenate(
        [
            (x + 2).ravel(),
            np.zeros(4),
            (x * x).ravel(),
            (x / 2).ravel(),
            np.clip(x, -1, 2).ravel(),
            np.zeros(4),
            np.full(4, 7.0),
            [9, 8, 9, 8],
            np.where(x < 0, 0.5, x).ravel(),
            (x + 0.5 * x * x).ravel(),
            (0.75 * x).ravel(),
        ]
    )
    _check(prog_inplace_methods, expected)


def prog_one_hot_scatter(lib):
    labels = lib.tensor([2, 0, 3])
    return lib.zeros(3, 4).scatter_(1, labels.unsqueeze(1), 1.0).tolist()


def test_scatter_one_hot():
    _check(prog_one_hot_scatter, np.eye(4)[[2, 0, 3]])


def prog_grad_through_inplace(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.clone()
    y.mul_(x)  # y = x^2
    y[0] = 5.0 * x[1]  # y = [5 x1, x1^2, x2^2]
    y.sum().backward()
    return x.grad.tolist()


def prog_grad_through_view_write(lib):
    x = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    base = x * 1.0
    v = base[1:3]
    v.mul_(10.0)  # base = [x0, 10 x1, 10 x2, x3]
    (base * base).sum().backward()
    return x.grad.tolist()


def prog_grad_copy_and_fill(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0, 4.0], requires_grad=True)
    y = a * 2.0
    y.copy_(b * 3.0)  # y no longer depends on a
    z = a * 1.0
    z.fill_(1.0)
    (y.sum() + (z * a).sum()).backward()
    return a.grad.tolist() + b.grad.tolist()


@pytest.mark.parametrize(
    "prog, expected",
    [
        (prog_grad_through_inplace, [0, 5 + 4, 6]),
        (prog_grad_through_view_write, [2, 200 * 2, 200 * 3, 8]),
        (prog_grad_copy_and_fill, [1, 1, 3, 3]),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_gradients_flow_through_writes(prog, expected):
    _check(prog, expected)


def test_inplace_on_grad_leaf_raises_like_torch():
    w = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        w[0:1].zero_()
    with tp.no_grad():
        w[0:1].zero_()
        w.mul_(3.0)
    assert w.tolist() == [0.0, 3.0] and w.is_leaf and w.requires_grad


def test_inplace_wider_result_type_raises():
    i = tp.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        i.add_(0.5)


def test_expand_view_cannot_be_written():
    e = tp.zeros(1).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        e[0] = 1.0


def test_version_counts_writes():
    x = tp.zeros(3)
    v0 = x._version
    x.add_(1.0)
    x[0] = 2.0
    assert x._version == v0 + 2


def test_random_fills_statistics():
    tp.manual_seed(0)
    n = tp.zeros(5000).normal_(2.0, 3.0).numpy()
    u = tp.zeros(5000).uniform_(-1.0, 5.0).numpy()
    assert abs(n.mean() - 2.0) < 0.2 and abs(n.std() - 3.0) < 0.15
    assert u.min() >= -1.0 and u.max() < 5.0 and abs(u.mean() - 2.0) < 0.15


def test_integer_indexing_compiles_once_per_shape():
    from tensorplay_jax.autograd import trace_counts

    x = tp.arange(40).float()
    x[0]
    before = trace_counts().get("IndexBackward", 0)
    vals = [x[i].item() for i in range(40)] + [x[-1].item()]
    assert vals == [*range(40), 39]
    assert trace_counts().get("IndexBackward", 0) == before


def test_integer_index_out_of_range_raises():
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        tp.zeros(4)[4]


def prog_saved_input_modified(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 1.0
    y = a * a  # saves a
    a.add_(1.0)
    y.sum().backward()


def prog_unsaved_input_modified(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 1.0
    y = a + 1.0  # add saves nothing
    a.mul_(2.0)
    y.sum().backward()
    return x.grad.tolist()


def test_backward_after_saved_input_written_raises_like_torch():
    libs = [tp] + ([_torch()] if _torch() is not None else [])
    for lib in libs:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            prog_saved_input_modified(lib)
    _check(prog_unsaved_input_modified, [1.0, 1.0, 1.0])


def test_a_base_drops_its_dead_views_as_it_makes_new_ones():
    """A buffer written through a fresh view each step (``buf[0].copy_(x)``) holds its views
    weakly and drops the dead ones: what it keeps stays bounded, and the live view still
    sees the base's writes."""
    buf = tp.zeros(3, 4)
    keep = buf[2]
    for i in range(1000):
        buf[0].copy_(tp.full((4,), float(i)))
    assert len(buf._views) <= 16
    buf[2] = tp.ones(4)
    assert keep.tolist() == [1.0] * 4
    assert buf[0].tolist() == [999.0] * 4


def test_a_write_through_a_view_after_many_views_died_reaches_every_live_view():
    r = tp.zeros(8)
    views = [r[i : i + 2] for i in range(0, 8, 2)]
    for _ in range(100):
        r[1:3]  # made and dropped
    views[1][0] = 5.0  # r[2]
    assert r.tolist() == [0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [v.tolist() for v in views] == [[0.0, 0.0], [5.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
