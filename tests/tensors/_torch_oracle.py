"""Write torch's answers to the cases of ``_torch_cases`` into ``data/torch_ops.npz``.

Run with torch importable (the benchmark-only extra), from the repository root::

    PYTHONPATH=/path/to/torch python -m tests.tensors._torch_oracle

Each case stores ``<case>/out<i>`` (its outputs) and ``<case>/grad<j>`` (the gradient
of ``sum(out * weights(out))`` over its float outputs, for each float input), and
``torch_version``. Nothing of tensorplay_jax runs here.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

from tests.tensors._torch_cases import CASES, outputs, weights

PATH = pathlib.Path(__file__).parent / "data" / "torch_ops.npz"


def _run(torch: object, name: str) -> dict[str, np.ndarray]:
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


def main() -> int:
    import torch

    data: dict[str, np.ndarray] = {"torch_version": np.array(torch.__version__)}
    for name in CASES:
        data.update(_run(torch, name))
    PATH.parent.mkdir(exist_ok=True)
    np.savez_compressed(PATH, **data)
    print(f"{len(CASES)} cases from torch {torch.__version__} -> {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
