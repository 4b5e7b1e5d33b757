"""The file store behind ``init_method="file://..."``: one file, many handles and processes.

Behaviours as tensorplay's ``FileStore`` documents them: values set through one
handle are read through another, ``add`` counts across processes (file locking),
waits end at their timeout, the last handle closed deletes the file (so the name
can be used again), and a file that cannot hold a store gets a clear error.
"""

from __future__ import annotations

import os
import stat

import pytest

from tensorplay_jax.runtime.file_store import FileStore, FileStoreError, FileStoreTimeout
from tests._procs import reported, run_workers
from tests.runtime import _file_store_workers as W


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store")


def test_a_value_set_through_one_handle_is_read_through_another(path):
    a, b = FileStore(path), FileStore(path)
    a.set("k", b"v1")
    a.set("k", "v2")  # overwritten; a str is stored as UTF-8
    assert b.get("k", timeout=1.0) == b"v2"
    a.close()
    b.close()


def test_the_file_is_created_owner_only(path):
    s = FileStore(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    s.close()


def test_an_existing_empty_file_is_used_as_it_is(path):
    open(path, "wb").close()  # as tensorplay's tests hand over a NamedTemporaryFile
    os.chmod(path, 0o600)
    s = FileStore(path)
    s.set("k", b"v")
    assert s.get("k") == b"v"
    s.close()


def test_add_counts_from_zero_and_across_handles(path):
    a, b = FileStore(path), FileStore(path)
    assert (a.add("n", 2), b.add("n", 3), a.add("n", -1)) == (2, 5, 4)
    a.close()
    b.close()


def test_delete_compare_set_and_num_keys(path):
    s = FileStore(path)
    s.set("a", b"1")
    assert s.compare_set("b", b"", b"x") == b"x"  # missing and expected empty: set
    assert s.compare_set("b", b"y", b"z") == b"x"  # holds another value: unchanged
    assert s.num_keys() == 2
    assert s.delete_key("a") and not s.delete_key("a")
    assert not s.check(["a"]) and s.check(["b"])
    s.close()


def test_a_wait_for_a_missing_key_ends_at_its_timeout_naming_it(path):
    s = FileStore(path)
    with pytest.raises(FileStoreTimeout, match=r"keys \['nope'\] did not appear .* within 0.2 s"):
        s.get("nope", timeout=0.2)
    s.close()


def test_the_last_handle_closed_deletes_the_file_and_the_name_can_be_used_again(path):
    a, b = FileStore(path), FileStore(path)
    a.set("k", b"old")
    a.close()
    assert os.path.exists(path)
    b.close()
    b.close()  # closing twice is harmless
    assert not os.path.exists(path)
    c = FileStore(path)
    assert not c.check(["k"])  # a fresh store: nothing of the last job's
    c.close()


def test_a_record_torn_by_a_dead_writer_is_cut_and_later_ones_are_read(path):
    s = FileStore(path)
    s.set("k", b"v")
    with open(path, "ab") as f:
        f.write(b"S\x05\x00")  # a writer killed mid-record
    t = FileStore(path)
    t.set("after", b"w")
    assert (t.get("k"), s.get("after", timeout=1.0)) == (b"v", b"w")
    s.close()
    t.close()


def test_counting_from_four_processes_at_once_loses_no_update(tmp_path):
    path = str(tmp_path / "store")
    results = run_workers(W.count_together, 4, args=[path], timeout=120)
    assert [reported(r)["total"] for r in results] == [4 * W.ADDS] * 4
    assert not os.path.exists(path)  # every handle closed: the file is gone


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(FileStoreError, match="is a directory; name a file"):
        FileStore(str(tmp_path))


def test_a_path_that_cannot_be_created_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_bytes(b"")
    with pytest.raises(FileStoreError, match=r"cannot open or create the store file .*Not a dir"):
        FileStore(str(afile / "store"))
    with pytest.raises(FileStoreError, match="No such file or directory"):
        FileStore(str(tmp_path / "missing" / "store"))


def test_a_file_others_may_write_is_refused(path):
    open(path, "wb").close()
    os.chmod(path, 0o666)
    with pytest.raises(FileStoreError, match=r"other users may write it .*chmod 600"):
        FileStore(path)
