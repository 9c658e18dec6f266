"""The rendered PBS job script body, run by bash under a PBS-like environment (no PBS server can
be installed here) with the local Hydra mpiexec as launcher: status file, DONE, exit code,
per-rank logs, and `hpcprof status` reading them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from hpcprof_cli import hpcprof

from hpcprof.config.experiment import expand
from hpcprof.config.site import load_site_file
from hpcprof.render.job import render_point, template_dirs, write_run
from hpcprof.run.rundir import RunDir

JOB_ID = "123.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"
SITE = {
    "name": "pbs-hydra", "scheduler": "pbs",
    "launcher": {"kind": "mpiexec", "flavor": "hydra", "command": "auto"},
    "node": {"cores": 8, "ranks_per_node": 2}, "paths": {"python": "auto"},
    "defaults": {"queue": "debug", "account": "proj", "filesystems": "home:eagle", "walltime": "00:05:00"},
    "env": {"HP_TEST_GREETING": "hello from PBS"},
}
REPORT = 'echo "rank=$HPCPROF_RANK local=$HPCPROF_LOCAL_RANK greeting=$HP_TEST_GREETING"'


def make_run(tmp_path: Path, script: str) -> RunDir:
    """Write the site YAML, render 2 nodes x 2 ranks of `bash -c SCRIPT` and write the run dir."""
    site_file = tmp_path / "pbs-hydra.yaml"
    site_file.write_text(yaml.safe_dump(SITE))
    site = load_site_file(site_file)
    exp = {"name": "pbsbody", "workload": {"kind": "command", "argv": ["bash", "-c", script]},
           "resources": {"nodes": 2, "ranks_per_node": 2}}
    (point,) = expand(exp, site, "test")
    run_dir = tmp_path / "runs" / "pbsbody" / "20250101-000000-pbs001"
    run_dir.parent.mkdir(parents=True)
    rendered = render_point(point, site, run_dir, run_dir.name, template_dirs(site, None))
    run = RunDir(write_run(rendered))
    run.record_submission("pbs", JOB_ID)
    return run


def run_body(run: RunDir, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run job.sh as PBS would: its environment, a node file with one line per node."""
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("localhost\nlocalhost\n")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LC_ALL": "C",
           "PBS_NODEFILE": str(nodefile), "PBS_JOBID": JOB_ID, "PBS_O_WORKDIR": str(tmp_path),
           "PBS_JOBNAME": "pbsbody", "PBS_ENVIRONMENT": "PBS_BATCH"}
    return subprocess.run(["bash", str(run.path / "job.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def hpcprof_status(run: RunDir, workdir: Path, path: str | None = None) -> dict[str, object]:
    """`hpcprof status RUN --format json` through the real CLI."""
    result = hpcprof("status", str(run.path), "--format", "json", workdir=workdir, cwd=Path.cwd(),
                     env={"PATH": path} if path else None, timeout=60)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    return row


def test_pbs_body_completes(tmp_path: Path) -> None:
    run = make_run(tmp_path, REPORT)
    result = run_body(run, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    status = run.job_status()
    assert status["job_id"] == JOB_ID and status["nodes"] == "2" and status["exit_code"] == "0"
    assert int(status["end"]) >= int(status["start"])
    assert run.done
    # Hydra merges the two `localhost` lines into one host, so local rank == global rank here.
    for rank in range(4):
        log = (run.path / "logs" / f"rank{rank}.log").read_text()
        assert f"rank={rank} local={rank} greeting=hello from PBS" in log
    assert sorted(p.name for p in (run.path / "logs").iterdir()) == [f"rank{r}.log" for r in range(4)]
    assert (run.path / "tmp").is_dir()
    row = hpcprof_status(run, tmp_path / "runs")
    assert (row["state"], row["exit_code"], row["job_id"]) == ("COMPLETED", 0, JOB_ID)


def test_pbs_body_rank_fails(tmp_path: Path) -> None:
    """Rank 1 exits 3: the job exits 3, writes exit_code=3 and DONE; status says FAILED, 3."""
    run = make_run(tmp_path, "exit $(( HPCPROF_RANK == 1 ? 3 : 0 ))")
    result = run_body(run, tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert run.job_status()["exit_code"] == "3" and run.done
    row = hpcprof_status(run, tmp_path / "runs")
    assert (row["state"], row["exit_code"]) == ("FAILED", 3)


def test_status_of_finished_run_without_pbs_client(tmp_path: Path) -> None:
    """A finished run (DONE, exit_code) is COMPLETED from its status file alone, e.g. after
    copying the run directory off the cluster."""
    run = make_run(tmp_path, REPORT)
    assert run_body(run, tmp_path).returncode == 0
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    assert shutil.which("qstat", path=str(bare)) is None
    assert hpcprof_status(run, tmp_path / "runs", path=str(bare))["state"] == "COMPLETED"
