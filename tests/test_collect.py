"""`hpcprof collect` for real (local runs, real nsys exports, SQLite and PostgreSQL stores):
isolation of bad files and runs, paths confined to the run, parallel = serial, incremental,
concurrent collects on a fresh work directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from postgres_server import fresh_postgres_db
from sqlalchemy import create_engine, text

from hpcprof.run.results import list_tables, read_table

EXPERIMENT = """name: t
workload:
  kind: command
  argv: ["true"]
resources:
  nodes: 1
  ranks_per_node: 1
sweep:
  resources.ranks_per_node: [1, 2, 3]
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])   # slow: a service
def db_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """$HPCPROF_DB for each backend (empty: the workdir's SQLite file)."""
    if request.param == "sqlite":
        return {}
    return {"HPCPROF_DB": fresh_postgres_db(request.getfixturevalue("postgres_server"))}


def nsys_runs(cwd: Path, fixtures: Path, env: dict[str, str]) -> list[Path]:
    """Three finished local runs turned into nsys runs holding the two H200 rank exports."""
    (cwd / "exp.yaml").write_text(EXPERIMENT)
    result = hpcprof("submit", "exp.yaml", "--site", "local", "--wait", cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    runs = sorted(p.parent for p in (cwd / "hpcprof-runs").glob("t/*/config.json"))
    for run in runs:
        config = json.loads((run / "config.json").read_text())
        config["experiment"]["profile"]["tool"] = "nsys"
        config["experiment"]["profile"]["ranks"] = [0, 1]      # the ranks whose profiles are copied in
        config["world_size"] = max(config["world_size"], 2)    # in the world (collect checks the rank set)
        (run / "config.json").write_text(json.dumps(config))
        (run / "profiles" / "nsys").mkdir(parents=True, exist_ok=True)
        for rank in (0, 1):
            shutil.copy(fixtures / "nsys/h200_seqpar_bf16" / f"rank{rank}.sqlite",
                        run / "profiles/nsys" / f"rank{rank}.sqlite")
    return runs


def damage(path: Path) -> None:
    """Random bytes in the middle of the file (as a bad disk or a cut copy would)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 65536] = os.urandom(min(65536, len(data) - middle))
    data[:100] = os.urandom(100)
    path.write_bytes(bytes(data))


def store_rows(cwd: Path, env: dict[str, str], sql: str) -> list[tuple]:
    url = env.get("HPCPROF_DB") or f"sqlite:///{cwd / 'hpcprof-runs/hpcprof.db'}"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_bad_file_and_bad_run_are_isolated(tmp_path: Path, fixtures_dir: Path, db_env: dict[str, str]) -> None:
    good, partial, broken = nsys_runs(tmp_path, fixtures_dir, db_env)
    damage(partial / "profiles/nsys/rank1.sqlite")
    (broken / "config.json").write_text('{"run_id": ')                    # a corrupt config.json
    escape = tmp_path / "escaped"
    (partial / "results").mkdir(exist_ok=True)
    (partial / "results/evil.json").write_text(json.dumps({f"../../../../{escape}/x": [{"a": 1}], "n": 1}))

    result = hpcprof("collect", "--workers", "2", cwd=tmp_path, env=db_env)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert any("rank1.sqlite" in line and "skipped" in line for line in lines)
    assert any(broken.name in line and "not collected" in line for line in lines)
    assert not escape.exists() and not list(tmp_path.parent.glob("**/x.csv"))
    for run, ranks in ((good, [0, 1]), (partial, [0])):
        kern = read_table(run, "nsys_cuda_gpu_kern_sum")
        assert sorted(kern["rank"].unique()) == ranks
        assert {"nsys_nccl", "nsys_overlap", "nsys_phases", "files_manifest"} <= set(list_tables(run))
    assert read_table(partial, "workload_evil")["n"].tolist() == [1]     # the rest of that file is kept
    assert any("evil.json" in line and "skipped" in line for line in lines)
    status = dict(store_rows(tmp_path, db_env, "SELECT run_id, collect_status FROM runs"))
    assert status == {good.name: "complete", partial.name: "partial", broken.name: "partial"}
    metrics = store_rows(tmp_path, db_env, f"SELECT count(*) FROM run_metrics WHERE run_id = '{good.name}'")
    assert metrics[0][0] > 0


@pytest.mark.slow
def test_parallel_equals_serial_and_is_incremental(tmp_path: Path, fixtures_dir: Path) -> None:
    """Without --workers, collect uses the CPUs it may use (as memory allows: cpus.default_workers)
    and says how many; its tables are those of one process."""
    from hpcprof.core.cpus import default_workers

    runs = nsys_runs(tmp_path, fixtures_dir, {})
    default = hpcprof("collect", runs[0].name, *(["--workers", "2"] if default_workers()[0] == 1 else []), cwd=tmp_path)
    assert default.returncode == 0
    count = max(2, default_workers()[0])
    why = "the CPUs this process may use" if default_workers()[0] > 1 else "--workers"
    assert f"rank files analysed by {count} worker processes ({why}" in default.stdout + default.stderr
    parallel = {name: read_table(runs[0], name) for name in list_tables(runs[0])}
    shutil.rmtree(runs[0] / "derived")
    for name in parallel:
        (runs[0] / "results" / f"{name}.parquet").unlink()
    serial_run = hpcprof("collect", runs[0].name, "--workers", "1", cwd=tmp_path)
    assert serial_run.returncode == 0
    assert "unchanged" not in serial_run.stderr
    serial = {name: read_table(runs[0], name) for name in list_tables(runs[0])}
    assert parallel.keys() == serial.keys() and "nsys_nccl" in serial
    for name in serial:
        pd.testing.assert_frame_equal(parallel[name], serial[name])
    nccl = serial["nsys_nccl"]
    assert nccl[nccl["scope"] == "all"].set_index("collective")["count"].to_dict() == {"AllGather": 10,
                                                                                       "ReduceScatter": 10}
    again = hpcprof("collect", runs[0].name, cwd=tmp_path)
    assert "2 file(s) unchanged" in again.stderr
    os.utime(runs[0] / "profiles/nsys/rank1.sqlite")                    # touched: analysed again
    assert "1 file(s) unchanged" in hpcprof("collect", runs[0].name, cwd=tmp_path).stderr
    for name in serial:
        pd.testing.assert_frame_equal(read_table(runs[0], name), serial[name])


@pytest.mark.slow
def test_concurrent_collects_on_a_fresh_workdir(tmp_path: Path, fixtures_dir: Path, db_env: dict[str, str]) -> None:
    made = tmp_path / "made"
    made.mkdir()
    runs = nsys_runs(made, fixtures_dir, {})
    fresh = tmp_path / "fresh"
    for run in runs:                                                      # run directories, no store yet
        shutil.copytree(run, fresh / "hpcprof-runs/t" / run.name)
    procs = [subprocess.Popen([sys.executable, "-m", "hpcprof", "collect"], cwd=fresh, env={**os.environ, **db_env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    for run in runs:
        kern = read_table(fresh / "hpcprof-runs/t" / run.name, "nsys_cuda_gpu_kern_sum")
        assert sorted(kern["rank"].unique()) == [0, 1]


@pytest.mark.slow
def test_collect_under_mpi4py_futures(tmp_path: Path, fixtures_dir: Path) -> None:
    """`mpiexec -n 3 python -m mpi4py.futures -m hpcprof collect`: two MPI workers, same tables."""
    runs = nsys_runs(tmp_path, fixtures_dir, {})
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec (the mpich wheel of the test extra provides one)")
    result = subprocess.run([mpiexec, "-n", "3", sys.executable, "-m", "mpi4py.futures", "-m", "hpcprof",
                             "collect", runs[0].name], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "2 mpi4py.futures worker(s)" in result.stderr
    kern = read_table(runs[0], "nsys_cuda_gpu_kern_sum")
    assert kern.groupby("rank")["Total Time (ns)"].sum().to_dict() == {0: 43_530_292, 1: 6_906_115}


def open_paths(pid: int) -> list[str]:
    """The files process `pid` has open or mapped (/proc); none once it has exited."""
    try:
        fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        maps = [line.split(maxsplit=5)[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                if line.count(" ") >= 5]
    except OSError:
        return []
    return fds + maps


def descendants(pid: int) -> list[int]:
    """The processes under `pid` (pool workers are the fork server's children, not collect's)."""
    children = [int(c) for c in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    return children + [d for c in children for d in descendants(c)]


@pytest.mark.slow
def test_a_worker_killed_mid_collect(tmp_path: Path, fixtures_dir: Path) -> None:
    """SIGKILL of a pool worker while it reads one of the first run's rank files (seen in /proc,
    not guessed by a sleep): that run is partial (exit 3), the next runs are still collected (a new
    pool), and collecting again completes it."""
    import signal
    import time

    runs = nsys_runs(tmp_path, fixtures_dir, {})
    for rank in range(2, 40):
        os.link(runs[0] / "profiles/nsys" / f"rank{rank % 2}.sqlite", runs[0] / "profiles/nsys" / f"rank{rank}.sqlite")
    config = json.loads((runs[0] / "config.json").read_text())
    config["world_size"], config["experiment"]["profile"]["ranks"] = 40, "all"      # the world of those 40 files
    (runs[0] / "config.json").write_text(json.dumps(config))
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof", "collect", "--workers", "2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    profiles = str((runs[0] / "profiles/nsys").resolve())
    busy = None  # a worker caught with one of the first run's rank files open: killed mid-file
    deadline = time.monotonic() + 60
    while busy is None and time.monotonic() < deadline and proc.poll() is None:
        busy = next((pid for pid in descendants(proc.pid) if any(p.startswith(profiles) for p in open_paths(pid))),
                    None)
    assert busy is not None, "no worker seen reading the first run's rank files"
    os.kill(busy, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err
    assert "a worker process died" in err and "Traceback" not in err
    for run in runs[1:]:
        assert sorted(read_table(run, "nsys_cuda_gpu_kern_sum")["rank"].unique()) == [0, 1]
    again = hpcprof("collect", runs[0].name, "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(read_table(runs[0], "nsys_cuda_gpu_kern_sum")["rank"].unique()) == list(range(40))


def test_the_files_manifest_lists_what_the_run_left(tmp_path: Path) -> None:
    """manifest (the run's `files_manifest` table): every log, profile and workload result (nested directories, hidden ones
    too, and links to files), not hidden, temporary or Parquet files, dangling links or linked
    directories; in path order (rank10 after rank1/ as Path objects sort), with rank and size."""
    from hpcprof.collect import manifest
    from hpcprof.run.rundir import RunDir

    files = {"logs/rank0.log": 3, "logs/.hidden": 1, "logs/x.tmp": 1, "profiles/nsys/rank10.sqlite": 7,
             "profiles/nsys/rank1/rank1.sqlite": 5, "profiles/nsys/rank2.nsys-rep": 2, "results/a.json": 4,
             "results/t.parquet": 1, "results/.old/rank5.json": 6}
    for name, size in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "profiles/nsys/rank3.sqlite").symlink_to(tmp_path / "profiles/nsys/rank10.sqlite")
    (tmp_path / "profiles/nsys/rank4.sqlite").symlink_to(tmp_path / "gone")
    (tmp_path / "profiles/linked").symlink_to(tmp_path / "profiles/nsys", target_is_directory=True)
    table = manifest(RunDir(tmp_path))
    assert list(table.itertuples(index=False, name=None)) == [
        ("logs", "logs/rank0.log", 0, 3),
        ("profiles", "profiles/nsys/rank1/rank1.sqlite", 1, 5),
        ("profiles", "profiles/nsys/rank10.sqlite", 10, 7),
        ("profiles", "profiles/nsys/rank2.nsys-rep", 2, 2),
        ("profiles", "profiles/nsys/rank3.sqlite", 3, 7),
        ("results", "results/.old/rank5.json", 5, 6),
        ("results", "results/a.json", pd.NA, 4)]
    assert str(table["rank"].dtype) == "Int64"
