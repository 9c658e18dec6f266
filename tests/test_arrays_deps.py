"""Arrays, dependencies, collect as a job and resubmit, on the real one-node Slurm and the real
OpenPBS: `submit --array` (Slurm --array, PBS -J; one run directory and one task id per point),
`submit --after RUN|SWEEP` (afterany), `collect --submit` (a collect job after the sweep) and
`resubmit [--failed]` (new runs linked to the old ones); and the bad input around them."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from slurm_cluster import poll

REPO = Path(__file__).resolve().parents[1]
SWEEP = """name: sweep
workload: {kind: command, argv: [bash, -c, 'echo "rank $HPCPROF_RANK point $POINT"; sleep 3']}
resources: {nodes: 1, ranks_per_node: 2, walltime: "00:05:00"}
sweep: {env.POINT: [a, b, c]}
"""
SLOW = """name: slow
workload: {kind: command, argv: [bash, -c, 'sleep 6; date +%s > "$HPCPROF_RUN_DIR/finished.$HPCPROF_RANK"']}
resources: {nodes: 1, ranks_per_node: 1, walltime: "00:05:00"}
"""
AFTER = """name: after
workload: {kind: command, argv: [bash, -c, 'date +%s > "$HPCPROF_RUN_DIR/started.$HPCPROF_RANK"']}
resources: {nodes: 1, ranks_per_node: 1, walltime: "00:05:00"}
"""
FAILS = """name: fails
workload: {kind: command, argv: [bash, -c, '[ "$POINT" = b ] && [ ! -e "$HPCPROF_RUN_DIR/../once" ] && touch "$HPCPROF_RUN_DIR/../once" && exit 4; exit 0']}
resources: {nodes: 1, ranks_per_node: 1}
sweep: {env.POINT: [a, b]}
"""


def experiment(cwd: Path, name: str, text: str) -> str:
    (cwd / f"{name}.yaml").write_text(text)
    return f"{name}.yaml"


def submitted(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """run id -> job id, from submit's output."""
    found = dict(re.findall(r"submitted (\S+) as (\S+)", proc.stderr))
    assert found, f"nothing submitted (rc {proc.returncode}): {proc.stderr}"
    return found


def states(cwd: Path, env: dict[str, str] | None = None) -> dict[str, dict]:
    proc = hpcprof("status", "--format", "json", env=env, workdir=cwd / "runs")
    assert proc.returncode == 0, proc.stderr
    return {row["run"]: row for row in json.loads(proc.stdout)}


def all_ended(cwd: Path, env: dict[str, str] | None = None) -> dict[str, dict]:
    return poll(lambda: states(cwd, env), lambda rows: all(r["state"] not in ("PENDING", "RUNNING", "UNKNOWN")
                                                           for r in rows.values()), 120)


@pytest.mark.slurm
def test_slurm_array_after_and_collect_job(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    ids = submitted(hpcprof("submit", experiment(tmp_path, "sweep", SWEEP), "--site", "slurm-local",
                            "--array", workdir=tmp_path / "runs"))
    array = {job.partition("_")[0] for job in ids.values()}
    assert len(ids) == 3 and len(array) == 1
    assert sorted(job.partition("_")[2] for job in ids.values()) == ["0", "1", "2"]
    sweep_id = next(iter(ids)).rsplit("-p", 1)[0]
    # the array held while the dependent job is submitted and looked at: a short array can end first
    subprocess.run(["scontrol", "hold", *array], capture_output=True, text=True, check=False)
    after = submitted(hpcprof("submit", experiment(tmp_path, "after", AFTER), "--site", "slurm-local",
                              "--after", sweep_id, workdir=tmp_path / "runs"))
    (after_job,) = after.values()
    job = subprocess.run(["scontrol", "show", "job", after_job], capture_output=True, text=True, check=True).stdout
    subprocess.run(["scontrol", "release", *array], capture_output=True, text=True, check=True)
    assert "Dependency=afterany:" in job and "JobState=PENDING" in job, job
    collect = hpcprof("collect", "--submit", "--site", "slurm-local", workdir=tmp_path / "runs")
    assert collect.returncode == 0, collect.stderr
    collect_run = re.search(r"collect job (\S+) submitted", collect.stderr)[1]
    rows = all_ended(tmp_path)
    assert all(r["state"] == "COMPLETED" for r in rows.values()), rows
    for run_id, job_id in ids.items():
        path = Path(rows[run_id]["path"])
        point = json.loads((path / "config.json").read_text())["experiment"]["env"]["POINT"]
        assert f"rank 1 point {point}" in (path / "logs" / "job.out").read_text()
        assert rows[run_id]["job_id"] == job_id
    ended = max(int(re.search(r"end=(\d+)", (Path(rows[r]["path"]) / "status").read_text())[1]) for r in ids)
    started = int((Path(rows[next(iter(after))]["path"]) / "started.0").read_text())
    assert started >= ended                                     # afterany: it ran after the whole array
    db = sqlite3.connect(tmp_path / "runs" / "hpcprof.db")
    collected = dict(db.execute("SELECT run_id, collect_status FROM runs").fetchall())
    assert all(collected[r] == "complete" for r in [*ids, *after]) and collect_run in collected


@pytest.mark.slurm
def test_bad_array_and_after_input_writes_nothing(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    mixed = SWEEP.replace("sweep: {env.POINT: [a, b, c]}", "sweep: {resources.walltime: ['00:01:00', '00:02:00']}")
    site = tmp_path / "small-arrays.yaml"
    site.write_text((REPO / "site_configs" / "slurm-local.yaml").read_text().replace(
        "name: slurm-local", "name: small-arrays") + "max_array_size: 2\n")
    cases = [
        (["submit", experiment(tmp_path, "mixed", mixed), "--site", "slurm-local", "--array"], "differs in `#SBATCH --time="),
        (["submit", experiment(tmp_path, "sweep", SWEEP), "--site-file", str(site), "--array"],
         "3 sweep points, but site small-arrays takes arrays of at most 2"),
        (["submit", "sweep.yaml", "--site", "slurm-local", "--after", "nosuchrun"], "nosuchrun"),
        (["submit", "sweep.yaml", "--site", "local", "--array"], "the local scheduler runs no job arrays"),
    ]
    for args, needle in cases:
        proc = hpcprof(*args, workdir=tmp_path / "runs")
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/*/config.json"))


@pytest.mark.slow
def test_resubmit_failed_runs_into_new_linked_runs(tmp_path: Path) -> None:
    first = hpcprof("submit", experiment(tmp_path, "fails", FAILS), "--site", "local", "--wait", workdir=tmp_path / "runs")
    assert first.returncode == 1
    sweep_id = next(iter(submitted(first))).rsplit("-p", 1)[0]
    failed = [r for r, row in states(tmp_path).items() if row["state"] == "FAILED"]
    assert len(failed) == 1 and failed[0].endswith("-p001")
    again = hpcprof("resubmit", sweep_id, "--failed", "--wait", workdir=tmp_path / "runs")
    assert again.returncode == 0, again.stderr
    (new_run,) = submitted(again)
    assert f"{failed[0]} -> {new_run}" in again.stderr
    rows = states(tmp_path)
    assert rows[new_run]["state"] == "COMPLETED" and len(rows) == 3
    config = json.loads((Path(rows[new_run]["path"]) / "config.json").read_text())
    assert config["resubmit_of"] == failed[0] and config["sweep_point"]["params"] == {"env.POINT": "b"}
    db = sqlite3.connect(tmp_path / "runs" / "hpcprof.db")
    assert db.execute("SELECT resubmit_of FROM resubmits WHERE run_id = ?", (new_run,)).fetchone() == (failed[0],)
    nothing = hpcprof("resubmit", new_run, "--failed", workdir=tmp_path / "runs")
    assert nothing.returncode == 2 and "none of" in nothing.stderr


@pytest.mark.slow
def test_resubmit_refuses_a_running_run(tmp_path: Path) -> None:
    slow = experiment(tmp_path, "slow", SLOW)
    (run_id,) = submitted(hpcprof("submit", slow, "--site", "local", workdir=tmp_path / "runs"))
    proc = hpcprof("resubmit", run_id, workdir=tmp_path / "runs")
    assert proc.returncode == 2 and "cancel it first" in proc.stderr
    assert hpcprof("cancel", run_id, workdir=tmp_path / "runs").returncode == 0


def test_pbs_array_and_after_on_openpbs(openpbs: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    # 12 s per point: the array must still run when the dependent job is submitted, also on a loaded machine
    two = SWEEP.replace("[a, b, c]", "[a, b]").replace("sleep 3", "sleep 12")
    ids = submitted(hpcprof("submit", experiment(tmp_path, "sweep", two), "--site", "pbs-local",
                            "--array", env=openpbs, workdir=tmp_path / "runs"))
    jobs = sorted(ids.values())
    assert len(jobs) == 2 and all(re.fullmatch(r"\d+\[[01]\]\.\S+", j) for j in jobs), jobs
    sweep_id = next(iter(ids)).rsplit("-p", 1)[0]
    after = submitted(hpcprof("submit", experiment(tmp_path, "after", AFTER), "--site", "pbs-local",
                              "--after", sweep_id, env=openpbs, workdir=tmp_path / "runs"))
    (after_job,) = after.values()
    qstat = json.loads(subprocess.run(["qstat", "-f", "-F", "json", after_job], capture_output=True, text=True,
                                      env=openpbs, check=True).stdout)
    (job,) = qstat["Jobs"].values()
    array_parent = re.sub(r"\[\d\]", "[]", jobs[0])
    assert job["job_state"] == "H" and f"afterany:{array_parent}" in job["depend"], job
    rows = all_ended(tmp_path, openpbs)
    assert all(r["state"] == "COMPLETED" for r in rows.values()), rows
    ended = max(int(re.search(r"end=(\d+)", (Path(rows[r]["path"]) / "status").read_text())[1]) for r in ids)
    assert int((Path(rows[next(iter(after))]["path"]) / "started.0").read_text()) >= ended
    single = hpcprof("submit", experiment(tmp_path, "one", SWEEP.replace("[a, b, c]", "[a]")),
                     "--site", "pbs-local", "--array", env=openpbs, workdir=tmp_path / "runs")
    assert single.returncode == 2 and "pbs arrays need at least 2 points" in single.stderr
