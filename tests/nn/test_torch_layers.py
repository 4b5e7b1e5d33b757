"""LSTM, BatchNorm2d, AdaptiveAvgPool2d and Categorical against torch's values on the same inputs.

torch's outputs and gradients are kept in ``golden/torch_layers.npz`` (made by
``golden/make_golden.py``), so these checks run without torch; where torch is
installed, ``test_the_golden_file_holds_torchs_values`` recomputes them.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.distributions import Categorical
from tests.nn.golden.make_golden import GOLDEN, normal

RTOL, ATOL = 1e-4, 1e-5
G = dict(np.load(GOLDEN))


def _close(ours, key: str) -> None:
    got = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    np.testing.assert_allclose(got, G[key], rtol=RTOL, atol=ATOL, err_msg=key)


def _lstm(name: str, **kwargs) -> tuple[nn.LSTM, list]:
    lstm = nn.LSTM(**kwargs)
    lstm.load_state_dict({k.split("/param/")[1]: v for k, v in G.items() if f"{name}/param/" in k})
    inputs = [
        tp.tensor(G[f"{name}/{k}"], requires_grad=True)
        for k in ("x", "h0", "c0")
        if f"{name}/{k}" in G
    ]
    return lstm, inputs


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        (
            "lstm_bi",
            dict(input_size=3, hidden_size=4, num_layers=2, batch_first=True, bidirectional=True),
        ),
        ("lstm_plain", dict(input_size=3, hidden_size=4, bias=False)),
    ],
    ids=["two_layers_bidirectional_batch_first_with_state", "one_layer_no_bias_unbatched"],
)
def test_lstm_outputs_and_gradients_match_torch(name: str, kwargs: dict) -> None:
    lstm, inputs = _lstm(name, **kwargs)
    y, (h, c) = lstm(inputs[0], (inputs[1], inputs[2])) if len(inputs) == 3 else lstm(inputs[0])
    for got, key in ((y, "y"), (h, "h"), (c, "c")):
        _close(got, f"{name}/{key}")
    ((y * tp.tensor(normal(*y.shape, seed=4))).sum() + (h * c).sum()).backward()  # torch's loss
    for t, key in zip(inputs, ("x", "h0", "c0"), strict=False):
        _close(t.grad, f"{name}/grad/{key}")
    for k, p in lstm.named_parameters():
        _close(p.grad, f"{name}/grad/param/{k}")


def test_lstm_state_dict_has_torchs_names_and_shapes() -> None:
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)
    want = {k.split("/param/")[1]: v.shape for k, v in G.items() if "lstm_bi/param/" in k}
    assert {k: v.shape for k, v in lstm.state_dict().items()} == want
    assert list(lstm.state_dict()) == [k.split("/param/")[1] for k in G if "lstm_bi/param/" in k]


@pytest.mark.parametrize("name", ["bn", "bn_cumulative"])
def test_batchnorm2d_train_then_eval_matches_torch(name: str) -> None:
    bn = nn.BatchNorm2d(3, momentum=0.1 if name == "bn" else None)
    bn.load_state_dict(
        {"weight": np.array([0.5, 1.5, -1.0]), "bias": np.array([0.1, -0.2, 0.3])}, strict=False
    )
    x1 = tp.tensor(G[f"{name}/x1"], requires_grad=True)
    y1 = bn(x1)
    (y1 * tp.tensor(normal(*y1.shape, seed=8))).sum().backward()
    _close(y1, f"{name}/y1")
    _close(x1.grad, f"{name}/grad/x1")
    _close(bn.weight.grad, f"{name}/grad/weight")
    _close(bn.bias.grad, f"{name}/grad/bias")
    bn(tp.tensor(G[f"{name}/x2"]))
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        _close(getattr(bn, k), f"{name}/{k}")
    bn.eval()
    _close(bn(tp.tensor(G[f"{name}/x3"])), f"{name}/y3")


def test_batchnorm2d_without_running_stats_normalises_by_the_batch_in_eval() -> None:
    bn = nn.BatchNorm2d(2, affine=False, track_running_stats=False).eval()
    x = normal(3, 2, 2, 2, seed=0)
    want = (x - x.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(
        x.var(axis=(0, 2, 3), keepdims=True) + 1e-5
    )
    np.testing.assert_allclose(bn(tp.tensor(x)).numpy(), want, rtol=RTOL, atol=ATOL)
    assert list(bn.state_dict()) == []


@pytest.mark.parametrize(("label", "size"), [("3x2", (3, 2)), ("none4", (None, 4)), ("1", 1)])
def test_adaptive_avg_pool2d_matches_torch(label: str, size) -> None:
    x = tp.tensor(G["pool/x"], requires_grad=True)
    y = nn.AdaptiveAvgPool2d(size)(x)
    (y * tp.tensor(normal(*y.shape, seed=10))).sum().backward()
    _close(y, f"pool/{label}/y")
    _close(x.grad, f"pool/{label}/grad/x")


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_categorical_log_prob_entropy_and_gradients_match_torch(kind: str) -> None:
    t = tp.tensor(G[f"cat/{kind}"], requires_grad=True)
    m = Categorical(**{kind: t})
    lp, ent = m.log_prob(tp.tensor(G["cat/value"])), m.entropy()
    (
        (lp * tp.tensor(G["cat/w"])).sum() + ent.sum() + (m.probs * m.logits.clamp(min=-30)).sum()
    ).backward()
    _close(lp, f"cat/{kind}/log_prob")
    _close(ent, f"cat/{kind}/entropy")
    _close(m.probs, f"cat/{kind}/probs_out")
    _close(m.logits, f"cat/{kind}/logits_out")
    _close(t.grad, f"cat/{kind}/grad")


def test_categorical_samples_follow_the_probabilities() -> None:
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5]], np.float32)
    tp.manual_seed(7)
    s = Categorical(probs=tp.tensor(probs * 4)).sample((20000,))  # unnormalised weights
    assert s.shape == (20000, 2)
    freq = np.stack([np.bincount(s.numpy()[:, b], minlength=3) / 20000 for b in range(2)])
    # 20000 draws: one standard error is at most 0.0036; 0.02 is more than five of them.
    np.testing.assert_allclose(freq, probs, atol=0.02)
    assert freq[1, 1] == 0.0  # a class of probability 0 is never drawn


def test_categorical_needs_exactly_one_parameter() -> None:
    with pytest.raises(ValueError, match="either `probs` or `logits` must be specified"):
        Categorical()
    with pytest.raises(ValueError, match="probs must be finite and >= 0"):
        Categorical(probs=tp.tensor([0.5, -0.1]), validate_args=True)


def test_the_golden_file_holds_torchs_values() -> None:
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.nn.golden.make_golden import cases

    fresh = cases()
    assert sorted(fresh) == sorted(G)
    for k, v in fresh.items():
        np.testing.assert_allclose(G[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
