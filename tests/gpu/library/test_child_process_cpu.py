"""child_lines: a silent child never blocks its reader (plain Python children, no GPU)."""

import signal
import subprocess
import sys
import time

from explorer.gpu.library.child_process import child_lines


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_child_that_finishes_gives_every_line_and_exits_cleanly():
    proc = _child("for i in range(3): print(i, flush=True)")
    assert [line.strip() for line in child_lines(proc, 30.0, 30.0)] == ["0", "1", "2"]
    assert proc.wait(timeout=30) == 0


def test_a_child_silent_from_the_start_is_ended():
    proc = _child("import time; time.sleep(60)")
    assert list(child_lines(proc, 0.5, 30.0)) == []
    assert proc.wait(timeout=30) == -signal.SIGKILL  # ended, not finished


def test_a_child_that_hangs_between_lines_is_ended_after_its_last_line():
    proc = _child("import time; print('try 7', flush=True); time.sleep(60)")
    assert [line.strip() for line in child_lines(proc, 30.0, 0.5)] == ["try 7"]
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_a_deadline_ends_a_child_that_keeps_talking():
    proc = _child("import time\nwhile True:\n    print('config', flush=True)\n    time.sleep(0.05)")
    began = time.monotonic()
    lines = list(child_lines(proc, 30.0, 30.0, deadline=lambda: began + 1.0))
    assert lines and all(line.strip() == "config" for line in lines)
    assert proc.wait(timeout=30) == -signal.SIGKILL  # a child that never stops, ended
