"""Why a run hung or died on the real one-node Slurm: `hpcprof submit --site slurm-local`
(srun --mpi=pmi2 --kill-on-bad-exit, 3 ranks) of the Gloo program with one planted fault
(tests/data/forensics_plant.py): the local site's faults (tests/test_forensics.py), a rank killed
by SIGKILL (srun names the task), and a hang ended by the walltime after Slurm's
`--signal=B:USR1` warning asked every rank for its dump; each named by `status`, `report`, the
HTML report and `logs --hang` as on the local site."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from slurm_cluster import TIME_LIMIT_JOBS
from test_forensics import FAULTS, PLANT, SAID, flat, write_experiment

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]


def submit(tmp_path: Path, argv: list[str], extra: str = "", timeout: float = 300) -> tuple[Path, dict]:
    """Submit the plant, wait; the run directory and its status row."""
    exp = write_experiment(tmp_path / "exp.yaml", [sys.executable, str(PLANT), *argv], extra)
    workdir = tmp_path / "runs"
    proc = hpcprof("submit", str(exp), "--site", "slurm-local", "--wait", workdir=workdir, timeout=timeout)
    assert re.search(r"submitted \S+ as \d+", proc.stderr), proc.stderr
    [run] = [p.parent for p in workdir.glob("*/*/config.json")]
    [row] = json.loads(hpcprof("status", run.name, "--format", "json", workdir=workdir, check=True).stdout)
    return run, row


def shown_everywhere(run: Path, row: dict) -> None:
    """The reason status gave is what report, the HTML report and logs --hang say."""
    workdir = run.parents[1]
    report = hpcprof("report", run.name, workdir=workdir, check=True).stdout
    assert f"{row['state']}: {row['reason']}" in flat(report), report
    page = workdir.parent / "report.html"
    hpcprof("report", run.name, "--html", str(page), workdir=workdir, check=True)
    assert html.escape(row["reason"]) in page.read_text()
    hang = hpcprof("logs", run.name, "--hang", workdir=workdir, check=True).stdout
    assert hang.startswith(f"{row['state']}: {row['reason']}\n"), hang
    for rank in range(3):
        assert (run / "logs" / f"rank{rank}.log").is_file()


#: Slurm's own runs: the local ones (tests/test_forensics.py) but the walltime's, and a rank killed by SIGKILL
SLURM_FAULTS = {name: FAULTS[name] for name in ("hang", "mismatch", "exception", "segv")}
SLURM_FAULTS["kill"] = (["kill", "3", "3"], "")
SLURM_SAID = {**{name: SAID[name] for name in SLURM_FAULTS if name in SAID},
              "kill": ("FAILED", r"rank 1 was killed by SIGKILL \(signal 9\) first; the others' collectives then failed "
                                 r"\(ranks 0, 2\)")}


@pytest.mark.parametrize("fault", list(SLURM_FAULTS))
def test_a_planted_fault_is_named(tmp_path: Path, fault: str) -> None:
    argv, extra = SLURM_FAULTS[fault]
    run, row = submit(tmp_path, argv, extra)
    state, said = SLURM_SAID[fault]
    assert row["state"] == state and re.search(said, row["reason"]), row
    shown_everywhere(run, row)


def walltime_hang(tmp_path: Path) -> tuple[Path, dict]:
    """Walltime 2 min, warning 60 s before it, on a rank that hangs: the run directory and status row."""
    return submit(tmp_path, ["hang", "3", "600", "3600"],
                  "  walltime: '00:02:00'\nforensics:\n  warning_seconds: 60\n", timeout=500)


TIME_LIMIT_JOBS["walltime"] = walltime_hang


def test_a_hang_ended_by_the_walltime(time_limit_jobs: dict) -> None:
    """Walltime 2 min, warning 60 s before it (--signal=B:USR1@60; Slurm sends it up to a minute
    early): every rank dumps while rank 2 saves its checkpoint and the others wait in all-reduce #6
    (run beside the other time-limit jobs by `time_limit_jobs`)."""
    run, row = time_limit_jobs["walltime"].result()
    assert "#SBATCH --signal=B:USR1@60" in (run / "job.sh").read_text()
    assert row["state"] == "TIMEOUT", row
    assert re.fullmatch(r"rank 2 never entered all_reduce #6 of the default group \(ranks 0, 1 waited \d+ s\); "
                        r"rank 2 was in `forensics_plant\.py:\d+ save_checkpoint`", row["reason"]), row
    assert "forensics=walltime-warning" in (run / "status").read_text()
    assert sorted(p.name for p in (run / "forensics").glob("fr_rank*")) == ["fr_rank0", "fr_rank1", "fr_rank2"]
    shown_everywhere(run, row)
