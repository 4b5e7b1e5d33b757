"""What an outsider who reaches the process-group rendezvous can and cannot do to a job.

The rendezvous is JAX's coordination service (a gRPC server on MASTER_PORT + 1) and
its key-value store, which has no authentication: anyone who reaches the port can
read and write any key. These tests act as that outsider: values written into the
store without the job secret (a replayed descriptor, a planted shared-memory
segment name) are refused with a clear error before they are used, and the job
still works for its real ranks; ranks given different secrets refuse each other at
init; a same-host job's coordinator listens on loopback only; and a segment name
that is not one this user's ranks would create is refused before it is mapped.
"""

import os
import re
import stat

import pytest

from tensorplay_jax.process_group import _shared_memory as shared_memory
from tests._procs import reported, run_workers
from tests.security import _pg_workers

REFUSAL = "not signed with this job's secret"


@pytest.fixture(scope="module")
def planted() -> list[dict]:
    """Both ranks' reports of one ``planted_values`` job (rank 1 plants, the reader calls;
    rank 0 also lists where the coordinator listens)."""
    res = run_workers(_pg_workers.planted_values, 2, timeout=150, env={"PGX_TIMEOUT": "10"})
    return [reported(w) for w in res]


def test_a_replayed_descriptor_is_refused(planted):
    got = planted[0]["descriptor"]
    assert got is not None, "the replayed descriptor was accepted"
    assert re.fullmatch(rf"\w+: all_reduce: .*{REFUSAL}.*", got, re.S), got


def test_a_planted_segment_name_is_refused(planted):
    got = planted[1]["shm-path"]
    assert got is not None, "the planted segment name was accepted"
    assert re.fullmatch(rf"\w+: new_group: .*{REFUSAL}.*", got, re.S), got


@pytest.mark.parametrize("engine", ["xla", "shm"])
def test_the_group_works_before_and_after_the_planting(planted, engine):
    for r, got in enumerate(planted):
        assert got[f"{engine}/before"] == [2.0] * 8, r
        assert got[f"{engine}/after"] == [3.0] * 8, r  # ranks give 1 and 2
        assert got[f"{engine}/pair"] == [2.0] * 8, r


def test_ranks_with_different_secrets_refuse_each_other(workers):
    secrets = [{"TENSORPLAY_JAX_RPC_SECRET": f"secret-of-rank-{r}"} for r in range(2)]
    res = workers(_pg_workers.different_secrets, 2, timeout=90, per_rank_env=secrets)
    for w in res:
        error = reported(w)["init_error"] or ""  # None: init_process_group accepted the values
        want = rf"ForgedValue: init_process_group: .*{REFUSAL}.*different secrets"
        assert re.match(want, error, re.S), str(w)


def test_same_host_coordinator_listens_on_loopback_only(planted):
    addrs = planted[0]["listen"]
    assert addrs, "nothing listens on the coordinator port"
    assert set(addrs) <= {"127.0.0.1", "::1"}, f"the coordinator listens on {addrs}"


# ------------------------------------------------------------------ segment names
@pytest.fixture
def segment():
    seg = shared_memory.Segment.create("ctrl", 4096)
    yield seg
    seg.unlink()
    seg.close()


def test_own_segment_attaches(segment):
    other = shared_memory.Segment.attach(segment.path, 4096, "new_group")
    other.buf[0] = 7
    assert segment.buf[0] == 7
    other.close()


@pytest.mark.parametrize(
    "make_path, reason",
    [
        (lambda seg, tmp: "/etc/passwd", "not a tensorplay_jax segment"),
        (lambda seg, tmp: seg.path + "/../x", "not a tensorplay_jax segment"),
        (lambda seg, tmp: os.path.join(str(tmp), os.path.basename(seg.path)), "not in"),
        (lambda seg, tmp: _link(seg.path), "symbolic link"),
    ],
    ids=["foreign-file", "dot-dot", "other-directory", "symlink"],
)
def test_foreign_segment_names_are_refused(segment, tmp_path, make_path, reason):
    path = make_path(segment, tmp_path)
    try:
        with pytest.raises(PermissionError, match=re.escape(reason)):
            shared_memory.Segment.attach(path, 4096, "new_group")
    finally:
        if os.path.islink(path):
            os.unlink(path)


def test_segment_of_the_wrong_size_or_mode_is_refused(segment):
    with pytest.raises(PermissionError, match="has 4096 bytes, expected 8192"):
        shared_memory.Segment.attach(segment.path, 8192, "new_group")
    os.chmod(segment.path, 0o644)
    with pytest.raises(PermissionError, match="mode 644"):
        shared_memory.Segment.attach(segment.path, 4096, "new_group")
    assert stat.S_IMODE(os.stat(segment.path).st_mode) == 0o644


def _link(target: str) -> str:
    link = os.path.join(shared_memory.shm_dir(), f"tpjax-ctrl-{os.getpid()}-{'ab' * 6}")
    os.symlink(target, link)
    return link
