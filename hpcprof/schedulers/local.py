"""The local machine as a scheduler: the job script runs as a background process group in its
own session, under `timeout` for the run's walltime (`submit --wait` follows its log).

A PID alone does not name a job: after the job ends the PID can be reused by anything. So at
submit the job's identity (PID, kernel start time, session id, boot id) is written to `job.pid`,
and a process counts as the job, and is signalled, only while all of them still match.
"""

from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpcprof.config.directives import walltime_seconds
from hpcprof.schedulers.base import FAILED, RUNNING, UNKNOWN, Job, JobState, Scheduler, no_dependencies

#: Seconds between the walltime's TERM and the KILL that follows.
KILL_AFTER = 10


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Identity:
    """What names one process for as long as it lives."""

    pid: int
    start: int      # start time in clock ticks since boot (/proc/PID/stat field 22)
    sid: int        # session id (field 6)
    boot: str

    @classmethod
    def of(cls, pid: int) -> Identity | None:
        """The identity of live, non-zombie process `pid`, or None."""
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            return None
        if fields[0] in ("Z", "X"):
            return None
        return cls(pid, int(fields[19]), int(fields[3]), _boot_id())

    @classmethod
    def load(cls, run_dir: Path) -> Identity | None:
        """The identity recorded at submit, or None if missing or unreadable."""
        try:
            data = json.loads((run_dir / "job.pid").read_text())
            return cls(int(data["pid"]), int(data["start"]), int(data["sid"]), str(data["boot"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, run_dir: Path) -> None:
        tmp = run_dir / f"job.pid.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self.__dict__))
        tmp.replace(run_dir / "job.pid")


class LocalScheduler(Scheduler):
    """Runs `timeout WALLTIME bash job.sh` in its own session; job id `local-<pid>`."""

    name = "local"
    template = "local.sh.j2"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        no_dependencies(self.name, after)
        from hpcprof.run.record import read_record

        walltime = read_record(run_dir / "config.json").walltime or "00:30:00"
        argv = ["timeout", "--signal=TERM", f"--kill-after={KILL_AFTER}", str(walltime_seconds(walltime)),
                "bash", str(script)]
        with open(run_dir / "logs" / "job.out", "ab") as log:
            process = subprocess.Popen(argv, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        identity = Identity.of(process.pid)  # our unreaped child: its PID cannot be reused yet
        if identity is None:
            process.wait()
            identity = Identity(process.pid, -1, process.pid, _boot_id())
        identity.save(run_dir)
        self._children[process.pid] = process
        return f"local-{process.pid}"

    def follow(self, job_id: str, run_dir: Path) -> None:
        """Copy the job's log to stdout until it ends (`submit --wait`). The job writes to its
        log file, never to us, so it does not depend on this process; a Ctrl-C reaches the
        caller (hpcprof.campaign.submit), which cancels the job."""
        process = self._children[int(job_id.removeprefix("local-"))]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with open(run_dir / "logs" / "job.out", "rb") as log:     # as text: in stdout's own encoding
            while True:
                chunk = log.read(65536)
                if chunk:
                    sys.stdout.write(decoder.decode(chunk))
                    sys.stdout.flush()
                elif process.poll() is not None:
                    break
                else:
                    time.sleep(0.1)
        sys.stdout.write(decoder.decode(b"", final=True))

    def _ours(self, run_dir: Path) -> Identity | None:
        """The job's process if it is still alive and still the one we started."""
        recorded = Identity.load(run_dir)
        if recorded is None or recorded.pid <= 1 or recorded.start < 0:
            return None
        child = self._children.get(recorded.pid)
        if child is not None and child.poll() is not None:
            return None
        return recorded if Identity.of(recorded.pid) == recorded and recorded.sid == recorded.pid else None

    def states(self, jobs: Sequence[Job]) -> dict[Job, JobState]:
        """Each job from its recorded process identity (no scheduler to ask: /proc is read)."""
        return {job: self._state(job.run_dir) for job in jobs}

    def _state(self, run_dir: Path) -> JobState:
        if self._ours(run_dir) is not None:
            return JobState(RUNNING)
        if (run_dir / "DONE").exists():
            return JobState(UNKNOWN)  # the run's status file decides
        if Identity.load(run_dir) is None:
            return JobState(FAILED, None, "job.pid missing or unreadable: not a job hpcprof started")
        return JobState(FAILED, None, "job process ended without writing DONE")

    def cancel(self, job_id: str, run_dir: Path) -> bool:
        """TERM, then KILL, the job's process group, only while it is verifiably ours and the
        run has not written DONE."""
        if (run_dir / "DONE").exists() or self._ours(run_dir) is None:
            return False
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            identity = self._ours(run_dir)
            if identity is None:
                break
            try:
                os.killpg(identity.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._ours(run_dir) is not None:
                time.sleep(0.1)
        return True
