"""`hpcprof status` of N runs asks the scheduler ONCE per poll (benchmarks/status_scale.py times 1,000), on the
real one-node Slurm and the real OpenPBS: each scheduler query client (sacct, squeue, scontrol, qstat) is
shadowed by a PATH shim that logs its call and execs the real one. Runs whose final state is recorded
are not asked about again; `compare` never asks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hpcprof_cli import hpcprof as run_cli
from pbs_server import openpbs  # noqa: F401 (fixture)
from slurm_cluster import poll, slurm_cluster  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("sacct", "squeue", "scontrol", "qstat")
POINTS = 5
SLEEPS = f"""name: sleeps
workload: {{kind: command, argv: [sleep, '300']}}
resources: {{nodes: 1, ranks_per_node: 1, walltime: "00:10:00"}}
sweep: {{env.POINT: [{", ".join(str(i) for i in range(POINTS))}]}}
"""


def shimmed(base: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    """`base` with each query client on its PATH, logging its call to $QUERY_LOG where that is set (so
    that the jobs' own calls, e.g. `scontrol show hostnames`, are not counted) before running."""
    shims, log = tmp_path / "shims", tmp_path / "queries.log"
    shims.mkdir()
    for name in QUERIES:
        real = shutil.which(name, path=base["PATH"])
        if real:
            (shims / name).write_text(f'#!/bin/sh\n[ -n "$QUERY_LOG" ] && echo "{name} $*" >> "$QUERY_LOG"\n'
                                      f'exec "{real}" "$@"\n')
            (shims / name).chmod(0o755)
    return {**base, "PATH": f"{shims}:{base['PATH']}", "PYTHONPATH": str(REPO)}, log


def hpcprof(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_cli(*args, workdir=cwd / "runs", cwd=cwd, env=env)
    assert proc.returncode == 0, f"hpcprof {' '.join(args)}: rc {proc.returncode}\n{proc.stderr}"
    return proc


def polled(env: dict[str, str], cwd: Path, log: Path) -> tuple[dict[str, str], list[str]]:
    """One `status` of every run: state by run, and the scheduler queries it made."""
    log.write_text("")
    rows = json.loads(hpcprof({**env, "QUERY_LOG": str(log)}, cwd, "status", "--format", "json").stdout)
    return {row["run"]: row["state"] for row in rows}, log.read_text().splitlines()


def check_one_query_per_poll(env: dict[str, str], cwd: Path, log: Path, site: str, client: str,
                             *submit: str) -> None:
    """N in-flight runs: one query; cancelled: one query, all CANCELLED; then recorded: none."""
    (cwd / "sleeps.yaml").write_text(SLEEPS)
    out = hpcprof(env, cwd, "submit", "sleeps.yaml", "--site", site, *submit)
    runs = re.findall(r"submitted (\S+) as", out.stderr)
    assert len(runs) == POINTS, out.stderr
    states, calls = polled(env, cwd, log)
    assert sorted(states) == sorted(runs) and set(states.values()) <= {"PENDING", "RUNNING"}, states
    assert len(calls) == 1 and calls[0].split()[0] in client, calls  # ONE query for all N runs
    hpcprof(env, cwd, "cancel", *runs)
    states, calls = poll(lambda: polled(env, cwd, log), lambda found: set(found[0].values()) == {"CANCELLED"}, 60)
    assert len(calls) <= 1, calls
    states, calls = polled(env, cwd, log)  # the final states are recorded: nothing to ask
    assert set(states.values()) == {"CANCELLED"} and calls == [], (states, calls)
    log.write_text("")
    hpcprof({**env, "QUERY_LOG": str(log)}, cwd, "compare", *runs, "--format", "json")  # compare reads recorded state only
    assert log.read_text() == ""


@pytest.mark.slurm
@pytest.mark.parametrize("array", [False, True], ids=["jobs", "array"])
def test_slurm_status_one_query_per_poll(slurm_cluster, tmp_path: Path, array: bool) -> None:  # noqa: F811
    """sacct where accounting storage is on, else (slurm-local's jobcomp) one `scontrol show job`."""
    env, log = shimmed(dict(os.environ), tmp_path)
    check_one_query_per_poll(env, tmp_path, log, "slurm-local", ("sacct", "scontrol"),
                             *(["--array"] if array else []))


def test_openpbs_status_one_qstat_per_poll(openpbs: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    env, log = shimmed(openpbs, tmp_path)
    check_one_query_per_poll(env, tmp_path, log, "pbs-local", ("qstat",))


# ------------------------------------------------------------------------------------------
# The parsing behind the one query (no scheduler needed)

def test_collapsed_array_ids_name_each_task() -> None:
    """sacct prints pending array tasks as one line `7_[2-4,9%2]` (Slurm's job_array docs: range,
    list and `%` throttle): each task is found in it."""
    from hpcprof.schedulers.slurm import array_ids, parse_sacct

    assert array_ids("7_[2-4,9%2]") == ["7_2", "7_3", "7_4", "7_9"]
    assert array_ids("7_3") == ["7_3"] and array_ids("12") == ["12"]
    sacct = "7_[2-3]|PENDING|0:0\n7_1|CANCELLED by 0|0:0\n7_1.batch|CANCELLED|0:15\n"
    assert parse_sacct(sacct, "7_3").state == "PENDING"
    assert (parse_sacct(sacct, "7_1").state, parse_sacct(sacct, "7_1").exit_code) == ("CANCELLED", 128 + 15)


def test_accounting_disabled_read_from_slurm_conf(tmp_path: Path) -> None:
    from hpcprof.schedulers.slurm import accounting_disabled

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nAccountingStorageType=accounting_storage/none\n")
    assert accounting_disabled(conf)
    conf.write_text("ClusterName=x\nAccountingStorageType=accounting_storage/slurmdbd\n")
    assert not accounting_disabled(conf)
    conf.write_text("ClusterName=x\n")  # Slurm's default: no accounting storage
    assert accounting_disabled(conf)
    assert not accounting_disabled(tmp_path / "absent.conf")  # configless: sacct is tried
