"""torch's answers to the tensor-operation cases of ``tests/tensors/_torch_cases.py``
(``torch_ops.npz``).

Each case stores ``<case>/out<i>`` (its outputs) and ``<case>/grad<j>`` (the gradient
of ``sum(out * weights(out))`` over its float outputs, for each float input); nothing
of tensorplay_jax runs here. ``tests/tensors/test_torch_parity.py`` checks ours against
the file, so it runs where torch is not installed; where it is, a test recomputes
:func:`cases` and checks that the file still holds torch's values.

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/tensors/golden/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.tensors._torch_cases import CASES, outputs, weights

GOLDEN = Path(__file__).with_name("torch_ops.npz")


def _case(torch: object, name: str) -> dict[str, np.ndarray]:
    case = CASES[name]
    leaves = [
        torch.tensor(a, requires_grad=case.differentiable and a.dtype.kind == "f")
        for a in case.inputs
    ]
    outs = outputs(case.fn(torch, *leaves))
    got = {f"{name}/out{i}": o.detach().numpy() for i, o in enumerate(outs)}
    floats = [o for o in outs if o.is_floating_point() and o.requires_grad]
    if floats:
        loss = sum(
            (o * torch.tensor(weights(tuple(o.shape), o.detach().numpy().dtype))).sum()
            for o in floats
        )
        loss.backward()
    for j, leaf in enumerate(leaves):
        if leaf.requires_grad:
            g = leaf.grad
            got[f"{name}/grad{j}"] = np.zeros(leaf.shape, np.float32) if g is None else g.numpy()
    return got


def cases() -> dict[str, np.ndarray]:
    """Every case's outputs and gradients, computed by torch."""
    import torch

    out: dict[str, np.ndarray] = {}
    for name in CASES:
        out.update(_case(torch, name))
    return out


if __name__ == "__main__":
    np.savez_compressed(GOLDEN, **cases())
    print(f"wrote {GOLDEN}")
