"""The launcher on every node: the RPC guide's example, unchanged and with no options, on
two simulated hosts; and a main-script function runs on the callee.

Each job starts one node with torchrun's hyphens and the other with its underscores
(one job per test: a launcher and its workers take seconds to start).
"""

from __future__ import annotations

import sys

import jax.numpy as jnp

from tests._docs import block
from tests._procs import free_port, handed_back
from tests._worker import OUT_DIR

FLAGS = {
    "hyphens": ["--nnodes", "2", "--node-rank", "{k}", "--nproc-per-node", "{p}",
                "--master-addr", "{addr}", "--master-port", "{port}"],
    "underscores": ["--nnodes=2", "--node_rank={k}", "--nproc_per_node={p}",
                    "--master_addr={addr}", "--master_port={port}"],
}  # fmt: skip


def _launch(
    cluster, on_hosts, script: list, spellings: list[str], per_node: int, timeout: float, env=None
):
    """Node ``k`` runs the launcher with ``spellings[k]`` on ``script`` (path and arguments),
    with ``env`` added to its environment; returns each node's output."""
    addr, port = cluster.addresses[0], str(free_port())
    commands = [
        [sys.executable, "-m", "tensorplay_jax.run"]
        + [f.format(k=k, p=per_node, addr=addr, port=port) for f in FLAGS[spelling]]
        + [str(p) for p in script]
        for k, spelling in enumerate(spellings)
    ]
    res = on_hosts(None, [0, 1], commands=commands, timeout=timeout, env=env)
    return [r.stdout for r in res]


# Runs each script given, unchanged, as __main__, one after the other (one start-up for both).
IN_TURN = """\
import runpy, sys
for path in sys.argv[1:]:
    runpy.run_path(path, run_name="__main__")
"""


def test_documented_rpc_and_process_group_examples_on_two_nodes(cluster, on_hosts, tmp_path):
    (tmp_path / "in_turn.py").write_text(IN_TURN)
    (tmp_path / "rpc_demo.py").write_text(block("# rpc_demo.py"))
    (tmp_path / "pg_demo.py").write_text(block("# pg_demo.py"))
    # pg_demo first: a process group must start before any JAX work in the process.
    script = [tmp_path / "in_turn.py", tmp_path / "pg_demo.py", tmp_path / "rpc_demo.py"]
    out = _launch(cluster, on_hosts, script, ["hyphens", "underscores"], 1, timeout=150)
    # What the examples print, computed here: pg_demo's gradient (the world size
    # everywhere), rpc_demo's line on rank 0.
    want = f"[rank 0] {jnp.ones(3) * 3} {jnp.ones(3) + 2} {jnp.arange(4)}"
    assert want in out[0].splitlines(), out
    for k in range(2):
        assert f"[rank {k}] {k} tensor([2., 2., 2.])" in out[k].splitlines(), out


MAIN_SCRIPT = """\
import os
import tensorplay_jax.distributed.rpc as rpc
from tests._worker import hand_back

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def my_rank():
    return RANK


rpc.init_rpc(f"worker{RANK}", rank=RANK, world_size=WORLD)
if RANK == 0:
    hand_back({"callee_ranks": [rpc.rpc_sync(f"worker{r}", my_rank) for r in range(WORLD)]})
rpc.shutdown()
"""


def test_main_script_function_runs_with_the_callees_globals(cluster, on_hosts, tmp_path):
    script = tmp_path / "main_rank.py"
    script.write_text(MAIN_SCRIPT)
    env = {OUT_DIR: str(tmp_path)}
    out = _launch(cluster, on_hosts, [script], ["underscores", "hyphens"], 1, timeout=120, env=env)
    assert handed_back(tmp_path, 0, str(out))["callee_ranks"] == [0, 1]  # each its own RANK
