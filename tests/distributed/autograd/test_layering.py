"""RPC and distributed autograd: a one-way dependency, a carrier API, internal targets by mark."""

from __future__ import annotations

import ast
from pathlib import Path

import tensorplay_jax
from tensorplay_jax.distributed.autograd import _context, _engine, _sendrecv
from tensorplay_jax.rpc import WorkerInfo
from tensorplay_jax.rpc.internal import CallInfo, internal_target, is_internal_target
from tests._procs import reported

PACKAGE = Path(tensorplay_jax.__file__).parent


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports: import statements and ``import_module``/``__import__``
    calls with a literal name (docstrings and messages do not count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
    return found


def test_rpc_imports_nothing_of_distributed():
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {mod}"
        for path in sorted((PACKAGE / "rpc").rglob("*.py"))
        for line, mod in _imported_modules(path)
        if "distributed" in mod
    ]
    assert not bad, "rpc/ must not import distributed/ (it registers with rpc instead):\n" + (
        "\n".join(bad)
    )


def test_other_folders_take_rpc_internals_from_the_seam_only():
    # run.py's launch/rendezvous imports move with the launch code (issue 12 item 7).
    bad = []
    for folder in ("distributed", "nn", "demo", "autograd", "collectives"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for line, mod in _imported_modules(path):
                parts = mod.split(".")
                private = [p for p in parts[2:] if p.startswith("_") and not p.endswith("__")]
                if parts[:2] == ["tensorplay_jax", "rpc"] and private:
                    bad.append(f"{path.relative_to(PACKAGE)}:{line}: {mod}")
    assert not bad, "import these from tensorplay_jax.rpc.internal:\n" + "\n".join(bad)


def test_the_package_own_rpc_targets_carry_the_mark():
    assert is_internal_target(_engine._apply_gradients)
    assert is_internal_target(_context._release_remote)
    assert not is_internal_target(_engine.backward)
    assert not is_internal_target(None)


def _send(func, func_name: str) -> dict:
    info = CallInfo(WorkerInfo("peer", 1), "call", func_name, 1, {}, func)
    _sendrecv.AutogradHooks().on_send_request(info, (), {})
    return info.metadata


def test_the_send_hook_consults_the_mark_not_the_name():
    def user_fn():
        return None

    @internal_target
    def marked():
        return None

    # Renamed: a name means nothing, the mark on the object does.
    marked.__name__ = marked.__qualname__ = "anything_else"
    marked.__module__ = "somewhere.else"
    cid = -12
    try:
        with _context.using(cid):
            assert _context.carried_id(_send(marked, "somewhere.else.anything_else")) is None
            # An unmarked function under the old hard-coded internal name is a user call.
            old_name = "tensorplay_jax.distributed.autograd._engine._apply_gradients"
            assert _context.carried_id(_send(user_fn, old_name)) == cid
        assert _context.carried_id(_send(user_fn, "user_fn")) is None  # no context: no id
    finally:
        _context.release(cid, skip=None)
    assert _context.lookup(cid) is None


CALLEE_IMPORTS_ONLY_RPC = """
import os, sys
rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == 0:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed.autograd as dist_autograd
    from tensorplay_jax import rpc
    from tensorplay_jax.rpc import internal
    marked = []
    class Seen(internal.RpcHooks):  # the agent hands hooks the function itself
        def on_send_request(self, info, args, kwargs):
            marked.append(internal.is_internal_target(info.func))
            return args, kwargs
    internal.register_hooks(Seen())
    rpc.init_rpc("w0", rank=0, world_size=ws)
    with dist_autograd.context() as ctx_id:
        t = tp.ones(3, requires_grad=True)
        out = rpc.rpc_sync("w1", tp.mul, args=(t, 3.0))
        dist_autograd.backward(ctx_id, [out.sum()])
        grad = dist_autograd.get_gradients(ctx_id)[t].tolist()
    from tests._worker import report
    report(grad=grad, marked=marked[:2])  # marked: tp.mul, then _apply_gradients
else:
    from tensorplay_jax import rpc  # nothing of distributed autograd, explicitly
    rpc.init_rpc("w1", rank=1, world_size=ws)
rpc.shutdown()
"""


def test_a_callee_that_imported_only_rpc_takes_part(workers):
    out = workers(CALLEE_IMPORTS_ONLY_RPC, 2, timeout=120)
    got = reported(out[0])
    assert got["grad"] == [3.0, 3.0, 3.0], out  # the callee ran the backward of tp.mul
    assert got["marked"] == [False, True], out  # only the gradient call is internal
