"""``python -m tensorplay_jax.demo [ps|collectives]``: run a demo (exit status 1 if a check fails).

``ps`` (the default): a parameter server and two trainers on scikit-learn's digits,
with RemoteModule, distributed autograd and DistributedOptimizer.
``collectives``: the ten differentiable collectives on 8 virtual CPU devices.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorplay_jax.demo", description=__doc__)
    p.add_argument("demo", nargs="?", default="ps", choices=("ps", "collectives"))
    p.add_argument("--epochs", type=int, default=12, help="ps: passes over the training set")
    p.add_argument("--batch-size", type=int, default=32, help="ps: examples per step")
    p.add_argument("--lr", type=float, default=0.05, help="ps: SGD learning rate")
    p.add_argument("--hidden", type=int, default=64, help="ps: hidden units")
    p.add_argument("--seed", type=int, default=0, help="ps: data split, order and init")
    p.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="ps: trainers update at once (Hogwild-style; no parity check)",
    )
    p.add_argument(
        "--profile",
        metavar="TRACE.json",
        help="ps: record the training on every worker into this Perfetto / Chrome-trace file",
    )
    a = p.parse_args(argv)
    if a.demo == "collectives":
        from tensorplay_jax.demo import _collectives

        return 0 if _collectives.run() else 1
    import jax

    jax.config.update("jax_platforms", "cpu")
    from tensorplay_jax.demo import _ps

    options = vars(a)
    del options["demo"]  # the rest are _ps.run's keywords, named alike
    return 0 if _ps.run(**options) else 1


if __name__ == "__main__":
    sys.exit(main())
