"""The examples run small: pipeline parallelism over two workers, the RNN with remote parts."""

from __future__ import annotations

from tests._procs import REPO_ROOT
from tests.examples import _workers as W


def _run(workers, name: str, nprocs: int, *args: str):
    path = str(REPO_ROOT / "examples" / name)
    return workers(W.run_example, nprocs, args=(path, *args), timeout=180)


def test_pipeline_parallel(workers):
    out = _run(workers, "pipeline_parallel.py", 3, "--steps", "20")[0].stdout
    assert "pipelined forward matches the unsplit model: True" in out, out
    assert "both shards trained: True" in out, out  # and the loss fell (exit status 0)


def test_rnn_with_remote_embedding_and_decoder(workers):
    out = _run(workers, "rnn_remote.py", 2, "--steps", "15")[1].stdout
    assert "trained: embedding (on ps) True, rnn (on trainer) True, decoder (on ps) True" in out
    assert "step  10" in out, out
