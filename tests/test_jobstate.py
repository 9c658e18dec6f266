"""hpcprof.campaign.jobstate against a job that ends while its state is read: the job appends its exit code
to the status file, then creates DONE (templates/_job.sh.j2), so a reader that looks at DONE first
and reads the status file second never sees DONE without the exit code."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from hpcprof.campaign.jobstate import pause_until_done, reconcile
from hpcprof.run.rundir import RunDir
from hpcprof.schedulers.base import COMPLETED, RUNNING, JobState

#: the last lines of every job script (templates/_job.sh.j2), as the job runs them
JOB_END = """hp_status() { printf '%s=%s\\n' "$1" "$2" >> "$RUN_DIR/status"; }
hp_status exit_code 0
hp_status end "$(date +%s)"
touch "$RUN_DIR/DONE"
"""


class EndsWhileRead(RunDir):
    """A running job's directory whose job runs its last lines right after the status file was read
    the first time: the moment a poll under load can be descheduled in."""

    def job_status(self) -> dict[str, str]:
        seen = super().job_status()
        if not (self.path / "DONE").exists():
            subprocess.run(["bash", "-c", JOB_END], env={**os.environ, "RUN_DIR": str(self.path)}, check=True)
        return seen


def started(path: Path) -> Path:
    """A job that wrote its start lines, as the job script does first."""
    (path / "status").write_text("start=1700000000\nhost=node1\njob_id=7\n")
    return path


def test_a_job_ending_between_the_reads_is_never_failed(tmp_path: Path) -> None:
    run = EndsWhileRead(started(tmp_path))
    first = reconcile(run, None)
    assert (tmp_path / "DONE").exists() and "exit_code=0" in (tmp_path / "status").read_text()
    assert first == JobState(RUNNING, None, "started, no DONE yet")      # not a terminal FAILED
    assert reconcile(run, None) == JobState(COMPLETED, 0, "")               # the next poll sees it end



def test_a_wait_s_pause_ends_when_the_job_writes_done(tmp_path: Path) -> None:
    """`submit --wait` backs off to 10 s between scheduler queries; the job's DONE ends the pause
    at once, so a run is seen done within a look (0.25 s), not up to 10 s late."""
    run = RunDir(started(tmp_path))
    ending = threading.Timer(0.5, subprocess.run, (["bash", "-c", JOB_END],),
                             {"env": {**os.environ, "RUN_DIR": str(tmp_path)}, "check": True})
    ending.start()
    began = time.monotonic()
    pause_until_done([run], 60.0)
    ending.join()
    assert run.done and time.monotonic() - began < 30
    assert reconcile(run, None) == JobState(COMPLETED, 0, "")
