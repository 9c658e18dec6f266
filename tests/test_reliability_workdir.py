"""Reliability: the work directory under concurrency and failure, read-only commands that
create nothing, run ids that are not patterns, one damaged run that does not hide the others
(real local runs, real processes)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error, runs


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.slow
def test_concurrent_submits_on_a_fresh_workdir(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    procs = [subprocess.Popen([sys.executable, "-m", "hpcprof", "submit", str(exp)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0] * 6, results
    assert not any("Traceback" in err for _, err in results)
    made = runs(tmp_path / "hpcprof-runs")
    assert len(made) == 6
    rows = json.loads(ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout)
    assert sorted(r["run"] for r in rows) == sorted(r.name for r in made)
    assert all(r["job_id"].startswith("local-") for r in rows)


def test_failed_submit_leaves_no_run_directory(tmp_path: Path) -> None:
    """The store refuses the sweep (a real SQLite constraint): the run directories already
    written are removed, so no run is left that the store does not know."""
    exp = experiment(tmp_path / "e.yaml", ["true"], "sweep:\n  env.A: [x, y, z]\n")
    workdir = tmp_path / "w"
    workdir.mkdir()
    with sqlite3.connect(workdir / "hpcprof.db") as conn:
        conn.execute("CREATE TABLE sweeps (sweep_id TEXT PRIMARY KEY CHECK (0), experiment TEXT, site TEXT, "
                     "spec JSON, created_at FLOAT)")
    result = hpcprof("submit", str(exp), "--workdir", str(workdir), cwd=tmp_path)
    assert result.returncode != 0
    assert runs(workdir) == []
    assert not any(p.name.endswith(".tmp") for p in workdir.rglob("*"))


@pytest.mark.slow
def test_read_only_commands_create_nothing(tmp_path: Path) -> None:
    for args in (["status"], ["report"], ["cancel", "nosuchrun"], ["report", "nosuchrun", "--workdir", ""]):
        one_line_error(hpcprof(*args, *(["--workdir", "missing-dir"] if "--workdir" not in args else []),
                               cwd=tmp_path))
    assert tree(tmp_path) == []
    # an existing work directory without a store: still nothing created
    (tmp_path / "empty").mkdir()
    ok(hpcprof("status", "--workdir", "empty", cwd=tmp_path))
    one_line_error(hpcprof("cancel", "x1", "--workdir", "empty", cwd=tmp_path), "x1")
    assert tree(tmp_path) == ["empty"]


@pytest.mark.slow
def test_run_ids_are_not_patterns(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    ok(hpcprof("submit", str(exp), "--wait", cwd=tmp_path))
    ok(hpcprof("submit", str(exp), "--wait", cwd=tmp_path))
    for command, pattern in (("status", "*"), ("report", "2*"), ("cancel", "[0-9]*"), ("cancel", "?" * 20)):
        one_line_error(hpcprof(command, pattern, cwd=tmp_path), "not a run id")
    assert {json.loads(ok(hpcprof("status", r.name, "--format", "json", cwd=tmp_path)).stdout)[0]["state"]
            for r in runs(tmp_path / "hpcprof-runs")} == {"COMPLETED"}


@pytest.mark.slow
def test_damaged_submission_does_not_hide_other_runs(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    ok(hpcprof("submit", str(exp), "--wait", cwd=tmp_path))
    ok(hpcprof("submit", str(exp), "--wait", cwd=tmp_path))
    first, second = runs(tmp_path / "hpcprof-runs")
    (first / "submission.json").write_bytes(b"\x00{garbage")
    (first / "DONE").unlink()
    rows = {r["run"]: r for r in json.loads(ok(hpcprof("status", "--format", "json", cwd=tmp_path)).stdout)}
    assert rows[second.name]["state"] == "COMPLETED"
    assert rows[first.name]["state"] == "UNKNOWN" and "damaged" in rows[first.name]["reason"]
