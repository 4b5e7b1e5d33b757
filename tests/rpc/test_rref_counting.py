"""Distributed reference counting: owners free values no worker holds an RRef to; leak check."""

from __future__ import annotations

from tests.rpc import _workers as W


def test_owner_frees_when_no_user_holds_it(workers):
    res = workers(W.counting, 3, timeout=120)
    assert "COUNT-OK" in res[0].stdout
    assert all(f"DONE {r.rank}" in r.stdout for r in res)


def test_leak_check_reports_values_still_referenced(workers):
    res = workers(W.leak, 2, timeout=120)
    assert "LEAK-REPORTED" in res[0].stdout


def test_rref_passed_on_before_its_owner_created_it(workers):
    res = workers(W.fresh_rref_to_third_worker, 3, timeout=120)
    assert "RACE-OK" in res[0].stdout
