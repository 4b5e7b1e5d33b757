"""Worker code for the examples tests: runs in every rank (see ``tests._procs``)."""

from __future__ import annotations

import runpy
import sys

from tests._worker import report


def run_example() -> None:
    """Run the example script ``sys.argv[1]``'s ``run`` with the arguments after it, and
    report the named checks it returns (``checks``)."""
    example = runpy.run_path(sys.argv[1], run_name="example")
    report(checks=example["run"](sys.argv[2:]))


def run_tutorial() -> None:
    """Run this rank of the tutorial ``sys.argv[1]`` through its ``run`` with the arguments
    after it, and report what it returns (``result``)."""
    tutorial = runpy.run_path(sys.argv[1], run_name="tutorial")
    report(result=tutorial["run"](sys.argv[2:]))
