"""Worker code for the examples tests: runs in every rank (see ``tests._procs``)."""

from __future__ import annotations

import runpy
import sys


def run_example() -> None:
    """Run the example script ``sys.argv[1]`` as ``__main__``, with the arguments after it."""
    sys.argv = [sys.argv[1], *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
