"""torch's values for LSTM, BatchNorm2d, AdaptiveAvgPool2d and Categorical (``torch_layers.npz``).

Each case is torch run on fixed inputs: the inputs, the parameters (by torch's
``state_dict`` names), the outputs and the gradients of a fixed loss. The tests
in ``tests/nn/test_torch_layers.py`` check ours against the file, so they run
where torch is not installed; where it is, a test recomputes :func:`cases` and
checks that the file still holds torch's values.

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch python tests/nn/golden/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).with_name("torch_layers.npz")


def normal(*shape: int, seed: int) -> np.ndarray:
    """Standard-normal float32 samples of ``shape`` from ``seed`` (the cases' inputs)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _t(a: np.ndarray, grad: bool = True):
    import torch

    return torch.tensor(a, requires_grad=grad)


def _lstm_case(out: dict, name: str, kwargs: dict, x: np.ndarray, state: bool) -> None:
    import torch

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(**kwargs)
    for k, v in lstm.state_dict().items():
        out[f"{name}/param/{k}"] = v.numpy()
    inputs = [_t(x)]
    out[f"{name}/x"] = x
    if state:
        d = 2 if kwargs.get("bidirectional") else 1
        shape = (kwargs.get("num_layers", 1) * d, x.shape[0 if kwargs.get("batch_first") else 1])
        h0, c0 = (
            normal(*shape, kwargs["hidden_size"], seed=2),
            normal(*shape, kwargs["hidden_size"], seed=3),
        )
        out[f"{name}/h0"], out[f"{name}/c0"] = h0, c0
        inputs += [_t(h0), _t(c0)]
        y, (h, c) = lstm(inputs[0], (inputs[1], inputs[2]))
    else:
        y, (h, c) = lstm(inputs[0])
    loss = (y * torch.tensor(normal(*y.shape, seed=4))).sum() + (h * c).sum()
    loss.backward()
    out[f"{name}/y"], out[f"{name}/h"], out[f"{name}/c"] = (t.detach().numpy() for t in (y, h, c))
    for label, t in zip(("x", "h0", "c0"), inputs, strict=False):
        out[f"{name}/grad/{label}"] = t.grad.numpy()
    for k, p in lstm.named_parameters():
        out[f"{name}/grad/param/{k}"] = p.grad.numpy()


def _batchnorm_case(out: dict, name: str, momentum: float | None) -> None:
    import torch

    bn = torch.nn.BatchNorm2d(3, momentum=momentum)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    x1, x2, x3 = (
        normal(4, 3, 2, 5, seed=5),
        normal(4, 3, 2, 5, seed=6) * 2 + 1,
        normal(2, 3, 2, 5, seed=7),
    )
    out[f"{name}/x1"], out[f"{name}/x2"], out[f"{name}/x3"] = x1, x2, x3
    t1 = _t(x1)
    y1 = bn(t1)
    (y1 * torch.tensor(normal(*y1.shape, seed=8))).sum().backward()
    out[f"{name}/y1"] = y1.detach().numpy()
    out[f"{name}/grad/x1"] = t1.grad.numpy()
    out[f"{name}/grad/weight"], out[f"{name}/grad/bias"] = (
        bn.weight.grad.numpy(),
        bn.bias.grad.numpy(),
    )
    bn(_t(x2, grad=False))
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        out[f"{name}/{k}"] = getattr(bn, k).numpy()
    bn.eval()
    out[f"{name}/y3"] = bn(_t(x3, grad=False)).detach().numpy()


def _pool_case(out: dict) -> None:
    import torch

    x = normal(2, 3, 7, 5, seed=9)
    out["pool/x"] = x
    for label, size in (("3x2", (3, 2)), ("none4", (None, 4)), ("1", 1)):
        t = _t(x)
        y = torch.nn.AdaptiveAvgPool2d(size)(t)
        (y * torch.tensor(normal(*y.shape, seed=10))).sum().backward()
        out[f"pool/{label}/y"], out[f"pool/{label}/grad/x"] = y.detach().numpy(), t.grad.numpy()


def _categorical_case(out: dict) -> None:
    import torch
    from torch.distributions import Categorical

    logits = normal(3, 4, seed=11)
    probs = np.abs(normal(3, 4, seed=12))
    probs[1, 2] = 0.0  # a class of probability 0: entropy's 0 * log 0
    value = np.array([0, 2, 3], np.int64)
    out["cat/logits"], out["cat/probs"], out["cat/value"] = logits, probs, value
    w = torch.tensor(normal(3, seed=13))
    for label, kw in (("logits", "logits"), ("probs", "probs")):
        t = _t(out[f"cat/{kw}"])
        m = Categorical(**{kw: t})
        lp, ent = m.log_prob(torch.tensor(value)), m.entropy()
        ((lp * w).sum() + ent.sum() + (m.probs * m.logits.clamp(min=-30)).sum()).backward()
        out[f"cat/{label}/log_prob"], out[f"cat/{label}/entropy"] = (
            lp.detach().numpy(),
            ent.detach().numpy(),
        )
        out[f"cat/{label}/probs_out"] = m.probs.detach().numpy()
        out[f"cat/{label}/logits_out"] = m.logits.detach().numpy()
        out[f"cat/{label}/grad"] = t.grad.numpy()
    out["cat/w"] = w.numpy()


def cases() -> dict[str, np.ndarray]:
    """Every case's arrays, computed with torch now."""
    out: dict[str, np.ndarray] = {}
    _lstm_case(
        out,
        "lstm_bi",
        dict(input_size=3, hidden_size=4, num_layers=2, batch_first=True, bidirectional=True),
        normal(2, 5, 3, seed=1),
        state=True,
    )
    _lstm_case(
        out,
        "lstm_plain",
        dict(input_size=3, hidden_size=4, bias=False),
        normal(6, 3, seed=1),
        state=False,
    )
    _batchnorm_case(out, "bn", 0.1)
    _batchnorm_case(out, "bn_cumulative", None)
    _pool_case(out)
    _categorical_case(out)
    return out


if __name__ == "__main__":
    np.savez_compressed(GOLDEN, **cases())
    print(f"wrote {GOLDEN}")
