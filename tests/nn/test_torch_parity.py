"""Layers and losses against tensorplay's reference implementation (torch) with the same weights.

Forward values and the gradients of every input and parameter must agree.
"""

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.nn import functional as F

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5


def _copy_params(ours, theirs):
    for name, p in theirs.named_parameters():
        dict(ours.named_parameters())[name].data = p.detach().numpy()


def _check_module(ours, theirs, *inputs, grad_inputs=True):
    _copy_params(ours, theirs)
    tin = [torch.tensor(x, requires_grad=grad_inputs and x.dtype.kind == "f") for x in inputs]
    oin = [tp.tensor(x, requires_grad=grad_inputs and x.dtype.kind == "f") for x in inputs]
    tout, oout = theirs(*tin), ours(*oin)
    np.testing.assert_allclose(oout.numpy(), tout.detach().numpy(), rtol=RTOL, atol=ATOL)
    cot = np.random.default_rng(0).standard_normal(tout.shape).astype(np.float32)
    tout.backward(torch.tensor(cot))
    oout.backward(cot)
    for t, o in zip(tin, oin, strict=True):
        if t.requires_grad:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    ours_p = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(
            ours_p[name].grad.numpy(), p.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name
        )


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_linear():
    _check_module(nn.Linear(5, 3), torch.nn.Linear(5, 3), _x(4, 5))
    _check_module(nn.Linear(5, 3, bias=False), torch.nn.Linear(5, 3, bias=False), _x(2, 6, 5))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=3),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(2, 3), padding="same", dilation=2),
        dict(kernel_size=3, padding="valid", groups=2, bias=False),
    ],
    ids=["plain", "stride_pad", "same_dilated", "groups"],
)
def test_conv2d(kwargs):
    _check_module(nn.Conv2d(4, 6, **kwargs), torch.nn.Conv2d(4, 6, **kwargs), _x(2, 4, 9, 8))


def test_conv2d_unbatched():
    _check_module(nn.Conv2d(2, 3, 3), torch.nn.Conv2d(2, 3, 3), _x(2, 6, 6))


def test_layer_norm():
    torch_ln = torch.nn.LayerNorm((3, 4))
    with torch.no_grad():
        torch_ln.weight.normal_()
        torch_ln.bias.normal_()
    _check_module(nn.LayerNorm((3, 4)), torch_ln, _x(2, 3, 4))
    _check_module(
        nn.LayerNorm(4, elementwise_affine=False),
        torch.nn.LayerNorm(4, elementwise_affine=False),
        _x(5, 4),
    )


def test_embedding_with_padding_idx():
    idx = np.array([[0, 2, 2], [4, 0, 1]])
    ours, theirs = nn.Embedding(5, 3, padding_idx=0), torch.nn.Embedding(5, 3, padding_idx=0)
    _check_module(ours, theirs, idx, grad_inputs=False)
    np.testing.assert_array_equal(ours.weight.grad.numpy()[0], 0.0)


def test_activations_and_flatten():
    for ours, theirs in [
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.Softmax(1), torch.nn.Softmax(1)),
        (nn.LogSoftmax(-1), torch.nn.LogSoftmax(-1)),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Dropout(0.3).eval(), torch.nn.Dropout(0.3).eval()),
    ]:
        _check_module(ours, theirs, _x(3, 4, 2))


def test_sequential_mlp():
    tp_net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    torch_net = torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 8),
        torch.nn.Tanh(),
        torch.nn.Linear(8, 2),
    )
    _check_module(tp_net, torch_net, _x(5, 6))


def _check_loss(ours_fn, torch_fn, logits, target, **kwargs):
    tl = torch.tensor(logits, requires_grad=True)
    ol = tp.tensor(logits, requires_grad=True)
    tt = torch.tensor(target)
    ot = tp.tensor(target)
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    okw = {k: tp.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    tloss, oloss = torch_fn(tl, tt, **tkw), ours_fn(ol, ot, **okw)
    np.testing.assert_allclose(oloss.numpy(), tloss.detach().numpy(), rtol=RTOL, atol=ATOL)
    cot = np.ones(tloss.shape, np.float32) * 1.5
    tloss.backward(torch.tensor(cot))
    oloss.backward(cot)
    np.testing.assert_allclose(ol.grad.numpy(), tl.grad.numpy(), rtol=RTOL, atol=ATOL)


LABELS = np.array([0, 3, 1, 3, 2, 0])
LABELS_IGNORED = np.array([0, -100, 1, 3, -100, 0])
CLASS_W = np.array([1.0, 2.0, 0.5, 3.0], np.float32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"weight": CLASS_W},
        {"label_smoothing": 0.2},
        {"weight": CLASS_W, "label_smoothing": 0.1},
    ],
    ids=["plain", "weight", "smoothing", "weight_smoothing"],
)
def test_cross_entropy_class_indices(reduction, kwargs):
    _check_loss(
        F.cross_entropy,
        torch.nn.functional.cross_entropy,
        _x(6, 4),
        LABELS_IGNORED if reduction != "none" else LABELS,
        reduction=reduction,
        **kwargs,
    )


def test_cross_entropy_spatial_and_probabilities_and_unbatched():
    spatial_target = np.random.default_rng(1).integers(0, 4, (2, 3, 3))
    _check_loss(F.cross_entropy, torch.nn.functional.cross_entropy, _x(2, 4, 3, 3), spatial_target)
    probs = np.random.default_rng(2).dirichlet(np.ones(4), 5).astype(np.float32)
    for kw in ({}, {"label_smoothing": 0.3, "weight": CLASS_W}):
        _check_loss(F.cross_entropy, torch.nn.functional.cross_entropy, _x(5, 4), probs, **kw)
    _check_loss(F.cross_entropy, torch.nn.functional.cross_entropy, _x(4), np.array(2))
    _check_loss(
        lambda a, b: nn.CrossEntropyLoss(ignore_index=1)(a, b),
        lambda a, b: torch.nn.CrossEntropyLoss(ignore_index=1)(a, b),
        _x(6, 4),
        LABELS,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    logp = np.log(np.random.default_rng(3).dirichlet(np.ones(4), 6)).astype(np.float32)
    target = LABELS_IGNORED if reduction == "mean" else LABELS
    _check_loss(F.nll_loss, torch.nn.functional.nll_loss, logp, target, reduction=reduction)
    _check_loss(
        F.nll_loss, torch.nn.functional.nll_loss, logp, target, weight=CLASS_W, reduction=reduction
    )
    _check_loss(
        lambda a, b: nn.NLLLoss(weight=tp.tensor(CLASS_W))(a, b),
        lambda a, b: torch.nn.NLLLoss(weight=torch.tensor(CLASS_W))(a, b),
        logp,
        target,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    _check_loss(
        F.mse_loss, torch.nn.functional.mse_loss, _x(3, 4), _x(3, 4, seed=1), reduction=reduction
    )
    _check_loss(
        lambda a, b: nn.MSELoss(reduction)(a, b),
        lambda a, b: torch.nn.MSELoss(reduction=reduction)(a, b),
        _x(5),
        _x(5, seed=2),
    )


def test_initialisation_distributions_match_tensorplay():
    """Same bounds/moments as the reference initialisations (statistically)."""
    tp.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 0.01 * bound
    assert np.abs(lin.bias.numpy()).max() <= bound
    conv = nn.Conv2d(8, 16, 3, groups=2)
    cb = 1 / np.sqrt(4 * 9)
    assert np.abs(conv.weight.numpy()).max() <= cb and np.abs(conv.bias.numpy()).max() <= cb
    emb = nn.Embedding(1000, 64)
    assert abs(emb.weight.numpy().std() - 1) < 0.02 and abs(emb.weight.numpy().mean()) < 0.02
    ln = nn.LayerNorm(5)
    assert ln.weight.tolist() == [1.0] * 5 and ln.bias.tolist() == [0.0] * 5
    torch_lin = torch.nn.Linear(400, 300)
    assert abs(torch_lin.weight.detach().numpy().std() - w.std()) < 0.01 * bound
