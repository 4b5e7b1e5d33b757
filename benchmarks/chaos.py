"""Chaos soak: a parameter server trains on while its trainers are killed, stopped, replaced.

This process is the parameter server ``ps``, rank 0 of a dynamic RPC group
(``init_rpc(..., world_size=None)``). The model (the demo's 64-64-10 MLP on
scikit-learn's digits) lives here as a ``RemoteModule``. ``--trainers``
processes join the group; each gets the module's RRef from ``ps`` and loops:
forward over RPC, loss, ``dist_autograd.backward``, ``DistributedOptimizer.step``,
reporting each loss. Until ``--seconds`` have passed (and at least ``--faults``
faults were injected, for at most ``--seconds`` + 120 s), a driver here picks a
trainer at random moments (uniform in ``--gap``) and does one of:

- ``kill``: SIGKILL, then a replacement joins under the same name and rank;
- ``stop``: SIGSTOP for ``rpc_timeout + 1`` s, then SIGCONT (its calls time out);
- ``leave``: asks it to leave (``rpc.shutdown()``), then a replacement joins.

Each trainer writes the phase it is in (forward, backward, step) to a file before
each phase, so each fault is counted by the phase it hit. At the end every
trainer leaves, and the script prints: faults by kind and phase, steps done,
errors the trainers saw (each must name a worker), and on the server, before the
trainers came and after they all left: live distributed-autograd contexts, owned
RRef records and their forks, pending calls and served requests, threads, open
file descriptors, and RSS growth since the warm-up. It checks the targets:
the server kept serving, every count is back at its baseline (threads and file
descriptors within ``--slack``), RSS grew less than 50 MiB, every error named a
worker, and the loss fell. Exit status 1 if a target is missed.

Usage::

    python benchmarks/chaos.py                      # 4 trainers, 180 s
    python benchmarks/chaos.py --seconds 15 --faults 5 --trainers 2 --json out.json  # CI's
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import optax

import tensorplay_jax as tp

PS = "ps"
RPC_TIMEOUT_S = 4.0
RSS_TARGET_MIB = 50.0
_losses: list[tuple[float, str, float]] = []  # (time, trainer, loss), on the server
_errors: list[tuple[str, str]] = []  # (trainer, "Type: message"), on the server
_model_rref: Any = None
_leave = threading.Event()


# ---------------------------------------------------------------- RPC targets
def model_rref() -> Any:
    """On ``ps``: the RRef of the model's module (a trainer holds a fork)."""
    return _model_rref


def record_loss(name: str, loss: float) -> None:
    _losses.append((time.monotonic(), name, loss))


def record_error(name: str, text: str) -> None:
    _errors.append((name, text))


def leave() -> None:
    """On a trainer: leave the group after the current step."""
    _leave.set()


# ---------------------------------------------------------------- the trainer
def _options(port: int, rpc_timeout: float = RPC_TIMEOUT_S) -> Any:
    from tensorplay_jax.distributed import rpc

    return rpc.GrpcRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", rpc_timeout=rpc_timeout, init_timeout=60
    )


def trainer(name: str, rank: int, port: int, phase_file: str, seed: int) -> None:
    """A trainer: join, then train on the server's model until told to leave."""
    from tensorplay_jax.demo import _data
    from tensorplay_jax.distributed import autograd as dist_autograd
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.distributed.nn import RemoteModule
    from tensorplay_jax.distributed.optim import DistributedOptimizer
    from tensorplay_jax.nn import functional as F

    rpc.init_rpc(name, rank=rank, world_size=None, rpc_backend_options=_options(port))
    data = _data.load(seed=0)
    rng = np.random.default_rng(seed)
    fd = os.open(phase_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def phase(p: str) -> None:
        os.pwrite(fd, p.ljust(8).encode(), 0)

    model = RemoteModule.init_from_module_rref(f"{PS}/cpu", rpc.rpc_sync(PS, model_rref))
    opt = DistributedOptimizer(optax.sgd(0.05), model.remote_parameters())
    parent = os.getppid()
    while not _leave.is_set():
        if os.getppid() != parent:  # the server's process is gone
            os._exit(3)
        idx = rng.choice(len(data.x_train), 32, replace=False)
        try:
            with dist_autograd.context() as ctx:
                phase("forward")
                logits = model(tp.tensor(data.x_train[idx]))
                loss = F.cross_entropy(logits, tp.tensor(data.y_train[idx]))
                phase("backward")
                dist_autograd.backward(ctx, [loss])
                phase("step")
                opt.step(ctx)
            phase("idle")
            rpc.rpc_async(PS, record_loss, args=(name, float(loss.item())))
        except Exception as e:
            phase("idle")
            with contextlib.suppress(Exception):  # the server unreachable: no one to tell
                rpc.rpc_sync(PS, record_error, args=(name, f"{type(e).__name__}: {e}"))
    phase("leaving")
    rpc.shutdown()


# ---------------------------------------------------------------- the server
def _counters() -> dict[str, float]:
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.distributed.autograd import _context
    from tensorplay_jax.rpc import internal

    gc.collect()
    info = rpc.get_debug_info()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return {
        "contexts": len(_context.active_context_ids()),
        "owner_rrefs": info["num_owner_rrefs"],
        "forks": internal.current_agent().rrefs.fork_count(),
        "pending": info["num_pending_requests"] + info["num_inflight_served"],
        "threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "rss_mib": round(rss, 1),
    }


class _Slot:
    """One trainer's name and rank, and the process holding them now."""

    def __init__(self, rank: int, port: int, tmp: Path, seed: int) -> None:
        self.name, self.rank, self.port, self.seed = f"trainer{rank}", rank, port, seed
        self.phase_file = str(tmp / f"{self.name}.phase")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped = threading.Event()  # SIGSTOPped now: not picked again until SIGCONT

    def start(self) -> None:
        self.starts += 1
        Path(self.phase_file).unlink(missing_ok=True)  # not the last process's phase
        args = [self.name, str(self.rank), str(self.port), self.phase_file]
        args.append(str(self.seed * 1000 + self.rank * 10 + self.starts))
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--trainer", *args],
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )

    def phase(self) -> str:
        try:
            return Path(self.phase_file).read_text().strip() or "joining"
        except OSError:
            return "joining"


def _resume(slot: _Slot) -> None:
    assert slot.proc is not None
    slot.proc.send_signal(signal.SIGCONT)
    slot.stopped.clear()


def _tell_leave(name: str) -> None:
    """Ask trainer ``name`` to leave (it may die meanwhile: then there is no one to ask)."""
    from tensorplay_jax.distributed import rpc

    try:
        rpc.rpc_sync(name, leave, timeout=30)
    except Exception as e:
        print(f"chaos: could not ask {name} to leave: {type(e).__name__}: {e}", flush=True)


def _in_group(name: str) -> bool:
    from tensorplay_jax.distributed import rpc

    return name in [w.name for w in rpc.get_worker_infos()]


def _wait(cond: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def serve(args: argparse.Namespace) -> dict[str, Any]:
    """The server and the driver: returns the run's numbers and targets."""
    global _model_rref
    from tensorplay_jax.demo._model import DigitsNet
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.distributed.nn import RemoteModule

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The server's own calls (creating the model, compiling it) may take long on a busy host.
    rpc.init_rpc(PS, rank=0, world_size=None, rpc_backend_options=_options(port, 120.0))
    tp.manual_seed(args.seed)
    model = RemoteModule(f"{PS}/cpu", DigitsNet)
    _model_rref = model.get_module_rref()
    # The baseline is a quiet server: the module's creation (a remote() to itself) has
    # finished and answered, so nothing counts as pending yet.
    _model_rref.to_here()
    _wait(lambda: _counters()["pending"] == 0, 30)
    before = _counters()
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(args.seed)
    slots = [_Slot(r, port, tmp, args.seed) for r in range(1, args.trainers + 1)]
    for slot in slots:
        slot.start()
    t0 = time.monotonic()
    _wait(lambda: len(_losses) >= 5 * args.trainers, 120)  # every trainer has compiled
    warm = _counters()
    faults: dict[str, int] = {}
    # Faults for this long after the warm-up, and until there were --faults of them: on a
    # busy host each fault's replacement takes longer to join, and fewer fit in the time.
    deadline = time.monotonic() + args.seconds
    last_call = deadline + 120.0

    def more() -> bool:
        now = time.monotonic() + args.gap[1]
        injected = sum(v for k, v in faults.items() if k != "leave failed")
        return now < deadline or (injected < args.faults and now < last_call)

    while more():
        time.sleep(rnd.uniform(*args.gap))
        # Trainers that have joined (a replacement may still be starting) and run.
        running = [s for s in slots if not s.stopped.is_set() and _in_group(s.name)]
        if not running:
            continue
        slot = rnd.choice(running)
        kind = rnd.choice(["kill", "stop", "leave"])
        ph = slot.phase()
        faults[f"{kind} mid-{ph}"] = faults.get(f"{kind} mid-{ph}", 0) + 1
        assert slot.proc is not None
        if kind == "kill":
            slot.proc.send_signal(signal.SIGKILL)
            slot.proc.wait(30)
        elif kind == "stop":
            slot.stopped.set()
            slot.proc.send_signal(signal.SIGSTOP)
            threading.Timer(RPC_TIMEOUT_S + 1.0, _resume, (slot,)).start()
            continue
        else:
            _tell_leave(slot.name)
            if slot.proc.wait(60) != 0:
                faults["leave failed"] = faults.get("leave failed", 0) + 1
        _wait(lambda s=slot: not _in_group(s.name), 30)
        slot.start()
    for slot in slots:  # every trainer leaves; the group is the server alone
        _wait(lambda s=slot: not s.stopped.is_set(), 30)
        _wait(lambda s=slot: _in_group(s.name) or s.proc.poll() is not None, 120)
        _tell_leave(slot.name)
    codes = [slot.proc.wait(120) for slot in slots if slot.proc is not None]
    _wait(lambda: len(rpc.get_worker_infos()) == 1, 30)
    served = rpc.rpc_sync(PS, len, args=([1, 2, 3],)) == 3  # the server still serves
    time.sleep(1.0)  # queued releases land
    after = _counters()
    rpc.shutdown()
    losses = [loss for _, _, loss in _losses]
    first, last = float(np.mean(losses[:20])), float(np.mean(losses[-20:]))
    unnamed = [e for e in _errors if "'ps'" not in e[1] and "'trainer" not in e[1]]
    growth = after["rss_mib"] - warm["rss_mib"]
    slack = args.slack
    targets = {
        "server kept serving": served,
        "trainers left cleanly at the end": all(c == 0 for c in codes),
        "contexts, RRef records, forks, pending back to baseline": all(
            after[k] == before[k] for k in ("contexts", "owner_rrefs", "forks", "pending")
        ),
        f"threads and fds within {slack} of baseline": all(
            after[k] <= before[k] + slack for k in ("threads", "fds")
        ),
        f"RSS growth under {RSS_TARGET_MIB:g} MiB": growth < RSS_TARGET_MIB,
        "every error names a worker": not unnamed,
        "loss fell": last < first,
    }
    return {
        "seconds": round(time.monotonic() - t0, 1),
        "trainers": args.trainers,
        "faults": faults,
        "faults_total": sum(v for k, v in faults.items() if k != "leave failed"),
        "steps": len(losses),
        "errors": len(_errors),
        "error_kinds": sorted({e[1].split(":")[0] for e in _errors}),
        "unnamed_errors": unnamed[:5],
        "before": before,
        "warm": warm,
        "after": after,
        "rss_growth_mib": round(growth, 1),
        "loss_first20": round(first, 4),
        "loss_last20": round(last, 4),
        "targets": targets,
    }


def main() -> int:
    # kill -USR1 <pid>: every thread's stack, to $TPJ_CHAOS_DUMPS/<pid>.txt (else stderr)
    dumps = os.environ.get("TPJ_CHAOS_DUMPS")
    out = open(f"{dumps}/{os.getpid()}.txt", "w") if dumps else sys.stderr  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=out)
    if len(sys.argv) > 1 and sys.argv[1] == "--trainer":
        name, rank, port, phase_file, seed = sys.argv[2:7]
        trainer(name, int(rank), int(port), phase_file, int(seed))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=180.0, help="how long faults go on")
    p.add_argument("--trainers", type=int, default=4)
    p.add_argument("--gap", type=float, nargs=2, default=(1.0, 4.0), help="seconds between faults")
    p.add_argument(
        "--faults", type=int, default=0, help="go on past --seconds until this many faults"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slack", type=int, default=8, help="threads/fds allowed above baseline")
    p.add_argument("--tmp", default=f"/tmp/tpj-chaos-{os.getpid()}", help="phase files")
    p.add_argument("--json", help="also write the numbers here")
    args = p.parse_args()
    res = serve(args)
    print(f"chaos soak: {res['trainers']} trainers, {res['seconds']} s")
    print(f"faults injected: {res['faults_total']}  {json.dumps(res['faults'], sort_keys=True)}")
    print(
        f"steps completed: {res['steps']}; errors the trainers saw: {res['errors']} "
        f"{res['error_kinds']}"
    )
    print(f"{'server':<14}{'before':>10}{'after':>10}")
    for k in ("contexts", "owner_rrefs", "forks", "pending", "threads", "fds"):
        print(f"{k:<14}{res['before'][k]:>10}{res['after'][k]:>10}")
    print(
        f"RSS growth since warm-up: {res['rss_growth_mib']} MiB; loss (mean of first/last 20): "
        f"{res['loss_first20']} -> {res['loss_last20']}"
    )
    for name, ok in res["targets"].items():
        print(f"  [{'ok' if ok else 'MISSED'}] {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    return 0 if all(res["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
