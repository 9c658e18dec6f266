"""Worker processes are forked from the caller only while it runs no other Python thread; else from a fork
server (a fork of a threaded process can inherit a held lock: CI hung 600 s in HTA's fork pool)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import threading, time
from hpcprof.core.pool import worker_context
print(worker_context().get_start_method())
threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
print(worker_context(["hpcprof.tools.torch.analysis.load"]).get_start_method())
"""


def test_fork_only_while_single_threaded() -> None:
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["fork", "forkserver"]


FROZEN = """
import gc
from concurrent.futures import ProcessPoolExecutor
from hpcprof.core.pool import worker_context
with ProcessPoolExecutor(1, mp_context=worker_context()) as pool:
    print(pool.submit(gc.get_freeze_count).result() > 1000, gc.get_freeze_count())
"""


def test_a_forked_worker_keeps_what_it_inherits_out_of_its_collections() -> None:
    """A worker forked from the caller freezes the objects it inherits (its collections would write to
    each and copy every page they are on); the caller's own collector is left as it was."""
    proc = subprocess.run([sys.executable, "-c", FROZEN], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0"]
