"""The local machine as a scheduler: the job script runs as a background process group
(or in the foreground with `submit --wait`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hpcprof.schedulers.base import FAILED, RUNNING, UNKNOWN, JobState, Scheduler


class LocalScheduler(Scheduler):
    """Runs `bash job.sh` in its own session; job id `local-<pid>`."""

    name = "local"
    template = "local.sh.j2"

    def submit(self, script: Path, run_dir: Path) -> str:
        log = open(run_dir / "logs" / "job.out", "ab")
        process = subprocess.Popen(["bash", str(script)], cwd=run_dir, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        (run_dir / "job.pid").write_text(str(process.pid))
        return f"local-{process.pid}"

    def run_foreground(self, script: Path, run_dir: Path) -> int:
        """Run the job here and now (for `submit --wait`), output to the terminal and job.out."""
        with open(run_dir / "logs" / "job.out", "ab") as log:
            process = subprocess.Popen(["bash", str(script)], cwd=run_dir, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            (run_dir / "job.pid").write_text(str(process.pid))
            assert process.stdout is not None
            for chunk in iter(lambda: process.stdout.readline(), b""):
                log.write(chunk)
                log.flush()
                os.write(1, chunk)
            return process.wait()

    @staticmethod
    def _pid(job_id: str) -> int:
        return int(job_id.removeprefix("local-"))

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie child of ours has finished
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return False

    def state(self, job_id: str, run_dir: Path) -> JobState:
        if self._alive(self._pid(job_id)):
            return JobState(RUNNING)
        if (run_dir / "DONE").exists():
            return JobState(UNKNOWN)  # the run's status file decides
        return JobState(FAILED, None, "job process ended without writing DONE")

    def cancel(self, job_id: str, run_dir: Path) -> None:
        pid = self._pid(job_id)
        with open(run_dir / "status", "a") as fh:
            fh.write(f"cancelled={int(time.time())}\n")
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._alive(pid):
                time.sleep(0.1)
            if not self._alive(pid):
                return
