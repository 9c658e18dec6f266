"""Reliability: a job's identity is checked before any signal, terminal states are final,
TIMEOUT is recognised, and `submit --wait` runs can be cancelled or interrupted (real local runs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, runs, state, wait_for

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_cancel_never_signals_a_reused_pid(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    ok(hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path))
    [run] = runs(tmp_path / "hpcprof-runs")
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # like `setsid sleep`
    try:
        # the recorded PID now names an unrelated process group (PID reuse); DONE gone as well
        ident = json.loads((run / "job.pid").read_text())
        (run / "job.pid").write_text(json.dumps({**ident, "pid": stranger.pid, "sid": stranger.pid}))
        (run / "DONE").unlink()
        ok(hpcprof("cancel", run.name, cwd=tmp_path))
        time.sleep(0.3)
        assert alive(stranger.pid), "cancel killed a process that is not the job's"
        assert state(tmp_path, run)["state"] != "RUNNING"
        # a recorded PID of 1 is never ours, never RUNNING
        (run / "job.pid").write_text(json.dumps({**ident, "pid": 1, "sid": 1}))
        assert state(tmp_path, run)["state"] != "RUNNING"
        ok(hpcprof("cancel", run.name, cwd=tmp_path))
    finally:
        stranger.kill()
        stranger.wait()


def test_terminal_state_is_final(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["bash", "-c", "exit 3"])
    assert hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path).returncode == 1
    [run] = runs(tmp_path / "hpcprof-runs")
    before = state(tmp_path, run)
    assert (before["state"], before["exit_code"]) == ("FAILED", 3)
    out = ok(hpcprof("cancel", run.name, cwd=tmp_path)).stderr
    assert "FAILED" in out
    assert state(tmp_path, run) == before
    assert "cancelled" not in (run / "status").read_text()


def test_walltime_kill_is_timeout(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["sleep", "60"], "  walltime: '00:00:02'\n")
    result = hpcprof("submit", str(exp), "--site", "local", "--wait", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    [run] = runs(tmp_path / "hpcprof-runs")
    row = state(tmp_path, run)
    assert row["state"] == "TIMEOUT", row
    assert isinstance(row["exit_code"], (int, type(None)))


def test_wait_run_can_be_cancelled_from_elsewhere(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["sleep", "60"])
    waiter = subprocess.Popen([sys.executable, "-m", "hpcprof", "submit", str(exp), "--site", "local", "--wait"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: runs(tmp_path / "hpcprof-runs") and (runs(tmp_path / "hpcprof-runs")[0] / "job.pid").exists(),
                 what="the run to start")
        [run] = runs(tmp_path / "hpcprof-runs")
        wait_for(lambda: state(tmp_path, run)["state"] == "RUNNING", what="RUNNING")
        ok(hpcprof("cancel", run.name, cwd=tmp_path))
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 1, err
        assert "Traceback" not in err
        assert state(tmp_path, run)["state"] == "CANCELLED"
    finally:
        waiter.kill()


#: `python -m hpcprof ARGS` as started from a terminal: Python's Ctrl-C handler installed even where this
#: test process inherited SIGINT ignored (a job started in the background by a non-interactive shell), which
#: a child would inherit and Python would then keep
AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "sys.argv[0] = 'hpcprof'; runpy.run_module('hpcprof', run_name='__main__')")


def test_ctrl_c_during_wait_cancels_cleanly(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["bash", "-c", "for i in $(seq 600); do echo tick $i; sleep 0.1; done"])
    waiter = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, "submit", str(exp), "--site", "local", "--wait"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: runs(tmp_path / "hpcprof-runs") and "tick" in
                 ((runs(tmp_path / "hpcprof-runs")[0] / "logs" / "job.out").read_text()
                  if (runs(tmp_path / "hpcprof-runs")[0] / "logs" / "job.out").exists() else ""),
                 what="output")
        waiter.send_signal(signal.SIGINT)
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 130, err
        assert "Traceback" not in err
        [run] = runs(tmp_path / "hpcprof-runs")
        row = state(tmp_path, run)
        assert row["state"] == "CANCELLED", row
        pid = json.loads((run / "job.pid").read_text())["pid"]
        assert not alive(pid)
    finally:
        waiter.kill()
