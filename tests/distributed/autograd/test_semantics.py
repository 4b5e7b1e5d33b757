"""Context lifecycle, release, retain_graph, errors and concurrency over real worker processes."""

from __future__ import annotations

import pytest

from tests.distributed.autograd import _workers as W
from tests.rpc._transports import env_of


@pytest.mark.parametrize("transport", ["grpc", "local"])
def test_context_release_retain_errors_concurrency(workers, transport):
    env = env_of(transport)
    out = workers(W.semantics, 4, timeout=240, env=env)
    printed = out[0].stdout
    for line in ("single-threaded checks ok", "threads ok", "parameter server ok"):
        assert line in printed, printed
    assert all("threads ok" in r.stdout for r in out[:3])


def test_dead_worker_during_backward(workers):
    out = workers(W.dead, 3, timeout=120, allow_exit={2: 3})
    assert "dead worker ok" in out[0].stdout, out[0].stdout
    assert out[2].returncode == 3
