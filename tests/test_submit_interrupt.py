"""A Ctrl-C (SIGINT) on `submit --wait` cancels the run and exits 130, also where the command was
started with SIGINT ignored (a shell's background job)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment


@pytest.mark.slow
def test_sigint_on_submit_wait_cancels_the_run(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["sleep", "120"])
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof", "submit", str(exp), "--site", "local", "--wait"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stderr is not None
        while "submitting" not in (line := proc.stderr.readline()):   # the console's lines go to stderr
            assert line
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, proc.stderr.read() if proc.stderr else ""
    [row] = json.loads(hpcprof("status", "--format", "json", cwd=tmp_path, check=True).stdout)
    assert row["state"] == "CANCELLED", row
    job = int(row["job_id"].removeprefix("local-"))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(job, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the job's process {job} still runs")
