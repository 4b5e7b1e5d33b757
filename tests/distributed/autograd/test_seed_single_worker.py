"""Issue 4's seed example, exactly as written, in a fresh process with no MASTER_* set
(a notebook user's situation): a single worker rendezvouses with itself on loopback."""

import os
import subprocess
import sys
import textwrap

from tests._procs import REPO_ROOT

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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", SEED], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2. 2. 2. 2.]"
