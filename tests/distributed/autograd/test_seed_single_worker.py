"""Issue 4's seed example, exactly as written, in a fresh process with no MASTER_* set
(a notebook user's situation): a single worker rendezvouses with itself on loopback.

And the same example as tensorplay code writes it (``backward(ctx_id, loss)``, one
Tensor, as the tensorplay docs show; a device named by ``device=``), run with only
its import lines changed.

Each script runs unchanged as the process's ``__main__``, with one line appended that
hands back the gradient it printed (``grads[t]``): the test checks that value."""

import os
import re
import subprocess
import sys
import textwrap

from tests._procs import REPO_ROOT, reported

# Appended to a script: what it printed, ``grads[t]``, handed back to the test.
REPORT = "from tests._worker import report; report(value=grads[t].tolist(), printed=str(grads[t]))"
# A plain Tensor of 2s (d(sum(2t))/dt), printed as tensorplay prints one (the seed's comment)
GRADIENT = {"value": [2.0] * 4, "printed": "tensor([2., 2., 2., 2.])"}


def run_as_written(script: str) -> subprocess.CompletedProcess:
    """``script``, with ``REPORT`` appended, as ``__main__`` of a fresh process without
    MASTER_*, RANK, WORLD*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-c", script + REPORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SEED = textwrap.dedent(
    """
    import tensorplay_jax as tp
    import tensorplay_jax.distributed.autograd as dist_autograd
    import tensorplay_jax.distributed.rpc as rpc

    rpc.init_rpc("worker", rank=0, world_size=1)
    def remote_double(t):
        return t * 2
    with dist_autograd.context() as ctx_id:
        t = tp.randn(4, requires_grad=True)
        out = rpc.rpc_sync("worker", remote_double, args=(t,))
        loss = out.sum()
        dist_autograd.backward(ctx_id, [loss])
        grads = dist_autograd.get_gradients(ctx_id)
        print(grads[t])   # [2. 2. 2. 2.]
    rpc.shutdown()
    """
)


def test_seed_example_runs_as_written_without_master_env():
    out = run_as_written(SEED)
    assert out.returncode == 0, out.stderr
    assert reported(out) == GRADIENT, out.stdout


TENSORPLAY_SEED = textwrap.dedent(
    """
    import tensorplay as tp
    import tensorplay.distributed.autograd as dist_autograd
    import tensorplay.distributed.rpc as rpc

    rpc.init_rpc("worker", rank=0, world_size=1)
    def remote_double(t):
        return t * 2
    with dist_autograd.context() as ctx_id:
        t = tp.randn(4, device="cpu", requires_grad=True)
        out = rpc.rpc_sync("worker", remote_double, args=(t,))
        loss = out.sum()
        dist_autograd.backward(ctx_id, loss)
        grads = dist_autograd.get_gradients(ctx_id)
        print(grads[t])   # [2. 2. 2. 2.]
    rpc.shutdown()
    """
)


def port(script: str) -> str:
    """``script`` with its ``tensorplay`` imports made ``tensorplay_jax`` ones; nothing else."""
    return re.sub(r"^(import|from) tensorplay\b", r"\1 tensorplay_jax", script, flags=re.MULTILINE)


def test_tensorplay_seed_runs_with_only_its_imports_changed():
    ported = port(TENSORPLAY_SEED)
    changed = [
        (a, b)
        for a, b in zip(TENSORPLAY_SEED.splitlines(), ported.splitlines(), strict=True)
        if a != b
    ]
    assert [a.split()[0] for a, _ in changed] == ["import"] * 3, changed
    out = run_as_written(ported)
    assert out.returncode == 0, out.stderr
    assert reported(out) == GRADIENT, out.stdout
