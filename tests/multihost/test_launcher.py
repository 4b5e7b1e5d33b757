"""The launcher on every node: the README's RPC example, unchanged and with no options, on
two simulated hosts (both flag spellings); and a main-script function runs on the callee."""

from __future__ import annotations

import re
import sys

import jax.numpy as jnp
import pytest

from tests._procs import REPO_ROOT, free_port

FLAGS = {
    "hyphens": ["--nnodes", "2", "--node-rank", "{k}", "--nproc-per-node", "{p}",
                "--master-addr", "{addr}", "--master-port", "{port}"],
    "underscores": ["--nnodes=2", "--node_rank={k}", "--nproc_per_node={p}",
                    "--master_addr={addr}", "--master_port={port}"],
}  # fmt: skip


def _readme_block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(marker)]
    return block


def _launch(cluster, on_hosts, script, spelling: str, per_node: int, timeout: float):
    addr, port = cluster.addresses[0], str(free_port())
    commands = [
        [sys.executable, "-m", "tensorplay_jax.run"]
        + [f.format(k=k, p=per_node, addr=addr, port=port) for f in FLAGS[spelling]]
        + [str(script)]
        for k in range(2)
    ]
    res = on_hosts(None, [0, 1], commands=commands, timeout=timeout)
    return [r.stdout for r in res]


@pytest.mark.parametrize("spelling", sorted(FLAGS))
def test_readme_rpc_example_on_two_nodes(cluster, on_hosts, tmp_path, spelling):
    script = tmp_path / "rpc_demo.py"
    script.write_text(_readme_block("# rpc_demo.py"))
    out = _launch(cluster, on_hosts, script, spelling, per_node=1, timeout=120)
    # What rank 0 prints, computed here.
    want = f"[rank 0] {jnp.ones(3) * 3} {jnp.ones(3) + 2} {jnp.arange(4)}"
    assert want in out[0].splitlines(), out


MAIN_SCRIPT = """\
import os
import tensorplay_jax.distributed.rpc as rpc

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def my_rank():
    return RANK


rpc.init_rpc(f"worker{RANK}", rank=RANK, world_size=WORLD)
if RANK == 0:
    print("CALLEE-RANKS", [rpc.rpc_sync(f"worker{r}", my_rank) for r in range(WORLD)])
rpc.shutdown()
"""


def test_main_script_function_runs_with_the_callees_globals(cluster, on_hosts, tmp_path):
    script = tmp_path / "main_rank.py"
    script.write_text(MAIN_SCRIPT)
    out = _launch(cluster, on_hosts, script, "hyphens", per_node=2, timeout=120)
    assert "[rank 0] CALLEE-RANKS [0, 1, 2, 3]" in out[0].splitlines(), out
