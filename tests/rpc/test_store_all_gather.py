"""The rendezvous store's ``all_gather`` when a rank exits: a real store on loopback."""

from __future__ import annotations

import pytest

from tensorplay_jax.rpc import _rendezvous
from tests._procs import free_port

SECRET = "gather-secret"


@pytest.fixture
def store():
    port = free_port()
    server = _rendezvous.StoreServer("127.0.0.1", port, SECRET)
    clients: list[_rendezvous.StoreClient] = []

    def connect(rank: int) -> _rendezvous.StoreClient:
        c = _rendezvous.StoreClient("127.0.0.1", port, rank, 10.0, SECRET)
        clients.append(c)
        return c

    yield connect
    for c in clients:
        c.close(clean=False)
    server.close()


def test_a_rank_that_published_and_then_exited_still_counts(store):
    first, second = store(0), store(1)
    first.setnx("devices/0", "rank 0's verdict")
    first.close(clean=False)  # exits at once, as a rank that failed on its own check does
    assert second.all_gather("devices", None, 2, 5.0) == ["rank 0's verdict", None]


def test_a_rank_that_exited_before_publishing_is_named(store):
    first, second = store(0), store(1)
    first.close(clean=False)
    with pytest.raises(
        ConnectionError, match=r"ranks \[0\] exited during the rendezvous \(devices"
    ):
        second.all_gather("devices", None, 2, 5.0)
