"""The launcher's output forwarding (``runtime.launch.WorkerProcesses``), with real processes."""

from __future__ import annotations

import io
import sys
import threading

from tensorplay_jax.runtime.launch import WorkerProcesses


class _ClosesAfterOneLine(io.StringIO):
    """An output that accepts one line, then refuses writes as a closed notebook stream does."""

    def write(self, s: str) -> int:
        if self.getvalue():
            raise RuntimeError("Event loop is closed")
        return super().write(s)


def test_a_worker_finishes_when_its_output_stops_accepting_lines():
    # 400 KB: several times a pipe's buffer, so a worker whose lines nobody reads blocks.
    cmd = [sys.executable, "-c", "for i in range(40000): print('line', i)"]
    out = _ClosesAfterOneLine()
    errors: list[BaseException] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        procs = WorkerProcesses([cmd], [{}], [1], stdout=out, stderr=io.StringIO())
        assert procs.wait(timeout=30) == 0
    finally:
        threading.excepthook = old_hook
    assert out.getvalue() == "[rank 1] line 0\n"
    assert errors == []
