"""The `silent` group of benchmarks/reliability.py: results wrong or
incomplete without a word (rank sets, clocks, a renamed kernel table, an unreadable run directory,
the "latest" sweep, one run id twice), tracebacks other than rich markup, and the smaller faults.

Every case runs the real CLI on real local runs made into nsys, torch and ncu runs with the real
fixtures (the 2xH200 seqpar exports and Kineto traces, an H200 ncu details page), damaged on purpose,
one fault per case. A fault that only shows as a wrong number counts `accepted in silence` unless
a line names it (and, in collect, the run is `partial`, exit 3); a file refused with its reason is
handled. An unreadable directory and a store of another user are made real for root too: the
command runs without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv), so permission bits hold.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliability_common import ACCEPTED, HANDLED, LEFT, LOST, OTHER, REPO, TRACEBACK, cli, one_line, run_dirs, write_exp
from reliability_faults import full_disk, worst

Case = tuple[str, Callable[[], str]]
NSYS = "nsys/h200_seqpar_bf16"
TORCH = "hta/h200_seqpar_bf16"
NCU = "gpu/run1/ncu/ncu_bfloat16_p2_rank0_details.csv"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
HOUR_NS, TEN_S_NS = 3_600_000_000_000, 10_000_000_000
#: run a command as root without the capabilities that bypass permission bits (not root: as it is)
PLAIN_USER = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []


def shift_export(path: Path, delta_ns: int, tables: tuple[str, ...] | None = None) -> None:
    """Add `delta_ns` to every start and end of `tables` of an nsys export (all its tables with both)."""
    with sqlite3.connect(path) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            if {"start", "end"} <= columns and (tables is None or table in tables):
                conn.execute(f'UPDATE "{table}" SET start = start + {delta_ns}, "end" = "end" + {delta_ns}')


def edit_trace(source: Path, target: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of a gzipped Kineto trace with `change` applied to each of its events."""
    with gzip.open(source, "rt") as fh:
        trace = json.load(fh)
    for event in trace["traceEvents"]:
        change(event)
    with gzip.open(target, "wt") as fh:
        json.dump(trace, fh)
    return target


def shifted(delta_us: float, cats: tuple[str, ...] | None = None) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        if "ts" in event and (cats is None or event.get("cat") in cats):
            event["ts"] += delta_us
    return change


class Runs:
    """Where the cases' files come from, and the local runs they make."""

    def __init__(self, tmp: Path, fixtures: Path) -> None:
        self.tmp, self.fixtures = tmp, fixtures
        self.lock = threading.RLock()       # fixture() is called with it held
        self.made: dict[str, Any] = {}

    def fixture(self, relative: str) -> Path:
        """A fixture from --fixtures, else from the repository's tests/fixtures (an `.xz` one unpacked once)."""
        stored = REPO / "tests" / "fixtures"
        for root in (self.fixtures, stored):
            if (root / relative).exists():
                return root / relative
        with self.lock:
            target = self.tmp / "fixtures" / relative
            if not target.exists():
                import lzma

                target.parent.mkdir(parents=True, exist_ok=True)
                with lzma.open(stored / f"{relative}.xz") as source, open(target.with_name(target.name + ".part"),
                                                                          "wb") as out:
                    shutil.copyfileobj(source, out)
                target.with_name(target.name + ".part").replace(target)
            return target

    def fresh(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.tmp))

    def base_run(self) -> Path:
        """A finished local run (made once) that the cases copy."""
        with self.lock:
            if "base" not in self.made:
                work = self.tmp / "silent-base"
                work.mkdir()
                result = cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work)
                assert result.returncode == 0, result.stderr
                self.made["base"] = work
            return self.made["base"]

    def run(self, tool: str, files: dict[str, Path], world: int) -> tuple[Path, Path]:
        """(workdir, run) of a copy of the base run made a `tool` run of `world` ranks with `files`
        as its profiles (name -> source)."""
        work = self.fresh() / "w"
        shutil.copytree(self.base_run(), work, symlinks=True)
        [run] = run_dirs(work / "hpcprof-runs")
        config = json.loads((run / "config.json").read_text())
        config["experiment"]["profile"]["tool"] = tool
        config["world_size"] = config["ranks_per_node"] = world
        config["experiment"]["resources"]["ranks_per_node"] = world
        (run / "config.json").write_text(json.dumps(config))
        (run / "profiles" / tool).mkdir(parents=True)
        for name, source in files.items():
            shutil.copyfile(source, run / "profiles" / tool / name)
        return work, run

    def nsys_rank(self, rank: int) -> Path:
        return self.fixture(f"{NSYS}/rank{rank}.sqlite")

    def torch_rank(self, rank: int) -> Path:
        return self.fixture(f"{TORCH}/rank{rank}.pt.trace.json.gz")

    def clean_critical_path(self) -> list[float]:
        """iteration_ns of `nsys critical-path` over the two fixture exports (made once)."""
        with self.lock:
            if "critical" not in self.made:
                work = self.fresh()
                for rank in (0, 1):
                    shutil.copyfile(self.nsys_rank(rank), work / f"rank{rank}.sqlite")
                result = cli("nsys", "critical-path", "rank0.sqlite", "rank1.sqlite", "--format", "json", cwd=work)
                assert result.returncode == 0, result.stderr
                self.made["critical"] = [row["iteration_ns"] for row in json.loads(result.stdout)]
            return list(self.made["critical"])


def collected(work: Path) -> tuple[subprocess.CompletedProcess[str], str | None, str]:
    """`collect` in `work`: the result, and the store's collect_status and note of its run."""
    result = cli("collect", "--workdir", "hpcprof-runs", cwd=work)
    with sqlite3.connect(work / "hpcprof-runs" / "hpcprof.db") as conn:
        [(status, note)] = conn.execute("SELECT collect_status, collect_note FROM runs").fetchall()
    return result, status, note or ""


def partial_naming(result: subprocess.CompletedProcess[str], status: str | None, note: str, *words: str) -> str:
    """HANDLED for a collect that exited 3, recorded the run partial and named `words` in its note."""
    if "Traceback" in result.stderr:
        return TRACEBACK
    if result.returncode == 0 or status != "partial":
        return ACCEPTED
    if result.returncode != 3:
        return f"{OTHER} (exit {result.returncode}: {' '.join(result.stderr.split())[-200:]})"
    missing = [w for w in words if w not in note]
    return HANDLED if not missing else f"{OTHER} (the note does not name {missing}: {' | '.join(note.splitlines())[:200]})"


def named_refusal(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """HANDLED for a command that said what is wrong (each of `words` on stderr) and did not exit 0."""
    if "Traceback" in result.stderr:
        return TRACEBACK
    if result.returncode == 0:
        return ACCEPTED
    missing = [w for w in words if w.lower() not in result.stderr.lower()]
    return HANDLED if not missing else f"{OTHER} (stderr does not name {missing}: {' '.join(result.stderr.split())[-200:]})"


def table_ranks(run: Path, table: str) -> set[int]:
    import pyarrow.parquet as pq

    return set(pq.read_table(run / "results" / f"{table}.parquet").column("rank").to_pylist())


# ---- class 5: wrong or incomplete results in silence -------------------------------------------

def rank_set_cases(rs: Runs) -> list[Case]:
    def collect_nsys(names: dict[str, int], world: int, *words: str, ranks: set[int] | None = None) -> Callable[[], str]:
        def run() -> str:
            work, run_dir = rs.run("nsys", {name: rs.nsys_rank(rank) for name, rank in names.items()}, world)
            result, status, note = collected(work)
            outcome = partial_naming(result, status, note, *words)
            if outcome != HANDLED:
                return outcome
            if ranks is not None and table_ranks(run_dir, "nsys_kernels") != ranks:
                return f"{LOST} (nsys_kernels holds ranks {sorted(table_ranks(run_dir, 'nsys_kernels'))})"
            if set(names.values()) == {0, 1} and (run_dir / "results" / "nsys_critical_path.parquet").exists():
                import pyarrow.parquet as pq

                got = pq.read_table(run_dir / "results" / "nsys_critical_path.parquet").column("iteration_ns").to_pylist()
                if got != rs.clean_critical_path():
                    return f"{LOST} (critical path {got[0]:.0f} ns, {rs.clean_critical_path()[0]:.0f} without the copy)"
            return HANDLED
        return run

    def collect_missing_middle(tool: str) -> Callable[[], str]:
        def run() -> str:
            if tool == "torch":
                files = {f"rank{r}.pt.trace.json.gz": rs.torch_rank(r if r < 2 else 1) for r in (0, 2)}
            else:
                files = {f"rank{r}.csv": rs.fixture(NCU) for r in (0, 2)}
            work, _ = rs.run(tool, files, 3)
            return partial_naming(*collected(work), "rank 1")
        return run

    def cli_twice(command: list[str], names: dict[str, str], *words: str) -> Callable[[], str]:
        """`command` in a folder of `names` (file -> fixture): one line naming `words`."""
        def run() -> str:
            work = rs.fresh()
            for name, source in names.items():
                shutil.copyfile(rs.fixture(source), work / name)
            result = cli(*command, cwd=work)
            outcome = one_line(result)
            if outcome != HANDLED:
                return outcome
            missing = [w for w in words if w not in result.stderr]
            return HANDLED if not missing else f"{OTHER} (the error does not name {missing})"
        return run

    r0, r1, t0, t1 = f"{NSYS}/rank0.sqlite", f"{NSYS}/rank1.sqlite", f"{TORCH}/rank0.pt.trace.json.gz", \
        f"{TORCH}/rank1.pt.trace.json.gz"
    return [
        ("collect: rank1.sqlite and report_rank_1.sqlite",
         collect_nsys({"rank0.sqlite": 0, "rank1.sqlite": 1, "report_rank_1.sqlite": 1}, 2, "report_rank_1.sqlite",
                      ranks={0, 1})),
        ("collect: rank1.sqlite and rank01.sqlite",
         collect_nsys({"rank0.sqlite": 0, "rank1.sqlite": 1, "rank01.sqlite": 1}, 2, "rank01.sqlite", ranks={0, 1})),
        ("collect: a rank file outside the world (rank5 of 2)",
         collect_nsys({"rank0.sqlite": 0, "rank1.sqlite": 1, "rank5.sqlite": 1}, 2, "rank5.sqlite", ranks={0, 1})),
        ("collect: ranks numbered from 1", collect_nsys({"rank1.sqlite": 0, "rank2.sqlite": 1}, 2, "from 1")),
        ("collect: a torch run missing a middle rank", collect_missing_middle("torch")),
        ("collect: an ncu run missing a middle rank", collect_missing_middle("ncu")),
        ("nsys critical-path: the same file twice",
         cli_twice(["nsys", "critical-path", "rank0.sqlite", "rank1.sqlite", "rank1.sqlite"],
                   {"rank0.sqlite": r0, "rank1.sqlite": r1}, "rank1.sqlite")),
        ("nsys nccl: two files for one rank",
         cli_twice(["nsys", "nccl", "rank0.sqlite", "rank1.sqlite", "report_rank_1.sqlite"],
                   {"rank0.sqlite": r0, "rank1.sqlite": r1, "report_rank_1.sqlite": r1}, "rank 1")),
        ("trace critical-path: the same file twice",
         cli_twice(["trace", "critical-path", "rank0.json.gz", "rank1.json.gz", "./rank1.json.gz"],
                   {"rank0.json.gz": t0, "rank1.json.gz": t1}, "rank1.json.gz")),
        ("trace critical-path: two files for one rank",
         cli_twice(["trace", "critical-path", "rank0.json.gz", "rank1.json.gz", "rank_1.json.gz"],
                   {"rank0.json.gz": t0, "rank1.json.gz": t1, "rank_1.json.gz": t1}, "rank 1")),
        ("ncu metrics: two files for one rank",
         cli_twice(["ncu", "metrics", "rank0.csv", "ncu_rank0.csv", "--format", "csv"],
                   {"rank0.csv": NCU, "ncu_rank0.csv": NCU}, "rank 0")),
    ]


def clock_cases(rs: Runs) -> list[Case]:
    def nsys_cli(command: list[str], damage: Callable[[Path], None], *words: str) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            for rank in (0, 1):
                shutil.copyfile(rs.nsys_rank(rank), work / f"rank{rank}.sqlite")
            damage(work / "rank1.sqlite")
            return named_refusal(cli("nsys", *command, "rank0.sqlite", "rank1.sqlite", cwd=work), *words)
        return run

    def nsys_collect(damage: Callable[[Path], None], *words: str) -> Callable[[], str]:
        def run() -> str:
            work, run_dir = rs.run("nsys", {f"rank{r}.sqlite": rs.nsys_rank(r) for r in (0, 1)}, 2)
            damage(run_dir / "profiles" / "nsys" / "rank1.sqlite")
            result, status, note = collected(work)
            headline = run_dir / "results" / "headline.json"
            metrics = json.loads(headline.read_text())["metrics"] if headline.exists() else []
            negative = [m[0] for m in metrics if m[1] is not None and m[1] < 0]
            if negative:
                return f"{LOST} (negative {', '.join(negative[:3])})"
            return partial_naming(result, status, note, *words)
        return run

    def torch_cli(command: list[str], change: Callable[[dict[str, Any]], None], *words: str,
                  both: bool = True) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            shutil.copyfile(rs.torch_rank(0), work / "rank0.pt.trace.json.gz")
            edit_trace(rs.torch_rank(1), work / "rank1.pt.trace.json.gz", change)
            files = ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"] if both else ["rank1.pt.trace.json.gz"]
            return named_refusal(cli("trace", *command, *files, cwd=work), *words)
        return run

    def torch_collect(change: Callable[[dict[str, Any]], None], *words: str) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            edit_trace(rs.torch_rank(1), work / "rank1.json.gz", change)
            work, _ = rs.run("torch", {"rank0.pt.trace.json.gz": rs.torch_rank(0),
                                       "rank1.pt.trace.json.gz": work / "rank1.json.gz"}, 2)
            return partial_naming(*collected(work), *words)
        return run

    def skew(command: str) -> Callable[[], str]:
        """A rank's whole clock an hour off: the critical path says so (corrected or refused)."""
        def run() -> str:
            work = rs.fresh()
            if command == "nsys":
                for rank in (0, 1):
                    shutil.copyfile(rs.nsys_rank(rank), work / f"rank{rank}.sqlite")
                shift_export(work / "rank1.sqlite", HOUR_NS)
                result = cli("nsys", "critical-path", "rank0.sqlite", "rank1.sqlite", "--segments", "--format", "json",
                             cwd=work)
            elif command == "trace":
                shutil.copyfile(rs.torch_rank(0), work / "rank0.json.gz")
                edit_trace(rs.torch_rank(1), work / "rank1.json.gz", shifted(-3_600_000_000))
                result = cli("trace", "critical-path", "rank0.json.gz", "rank1.json.gz", "--segments", "--format",
                             "json", cwd=work)
            else:
                work, run_dir = rs.run("nsys", {f"rank{r}.sqlite": rs.nsys_rank(r) for r in (0, 1)}, 2)
                shift_export(run_dir / "profiles" / "nsys" / "rank1.sqlite", HOUR_NS)
                result = cli("collect", "--workdir", "hpcprof-runs", cwd=work)
            if "Traceback" in result.stderr:
                return TRACEBACK
            said = [line for line in (result.stderr + result.stdout).splitlines() if "clock" in line and "rank 1" in line]
            if not said:
                return ACCEPTED
            if command != "collect" and result.returncode == 0:   # corrected: the segments on one clock
                segments = json.loads(result.stdout)
                starts = {r: [s["start_ns"] for s in segments if s["rank"] == r] for r in (0, 1)}
                if abs(min(starts[1]) - min(starts[0])) > 1e9:
                    return f"{OTHER} (said, but the segments are still {abs(min(starts[1]) - min(starts[0])) / 1e9:.0f} s apart)"
            return HANDLED
        return run

    def negative_duration(path: Path) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5000000 WHERE rowid IN '
                         "(SELECT k.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                         "WHERE s.value LIKE 'nvjet%' LIMIT 3)")

    def rename_kernels(path: Path) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO CUPTI_ACTIVITY_KIND_KERNEL_V2")

    def torch_negative_duration(event: dict[str, Any]) -> None:
        if event.get("cat") == "kernel" and str(event.get("name", "")).startswith("nvjet"):
            event["dur"] = -5000

    return [
        ("negative timestamps: nsys critical-path",
         nsys_cli(["critical-path"], lambda p: shift_export(p, -TEN_S_NS), "rank1.sqlite", "negative")),
        ("negative timestamps: collect", nsys_collect(lambda p: shift_export(p, -TEN_S_NS), "rank1.sqlite", "negative")),
        ("GPU kernels 10 s off the CPU clock: nsys overlap",
         nsys_cli(["overlap"], lambda p: shift_export(p, TEN_S_NS, ("CUPTI_ACTIVITY_KIND_KERNEL",)), "rank1.sqlite",
                  "clock")),
        ("GPU kernels 10 s off the CPU clock: trace temporal",
         torch_cli(["temporal"], shifted(10_000_000, ("kernel",)), "rank1.pt.trace.json.gz", "clock", both=False)),
        ("GPU kernels 10 s off the CPU clock: collect torch",
         torch_collect(shifted(10_000_000, ("kernel",)), "rank1", "clock")),
        ("rank clocks 1 h apart: nsys critical-path", skew("nsys")),
        ("rank clocks 1 h apart: trace critical-path", skew("trace")),
        ("rank clocks 1 h apart: collect", skew("collect")),
        ("negative kernel durations: collect", nsys_collect(negative_duration, "rank1.sqlite")),
        ("negative kernel durations: trace kernels",
         torch_cli(["kernels"], torch_negative_duration, "rank1.pt.trace.json.gz", "before they start")),
        ("renamed kernel table: nsys overlap", nsys_cli(["overlap"], rename_kernels, "rank1.sqlite", "kernel")),
        ("renamed kernel table: collect", nsys_collect(rename_kernels, "rank1.sqlite", "kernel")),
    ]


def workdir_cases(rs: Runs) -> list[Case]:
    def sweep_work() -> tuple[Path, list[Path]]:
        work = rs.fresh()
        result = cli("submit", str(write_exp(work / "e.yaml", ["true"], "sweep:\n  env.A: [x, y]\n")), "--wait", cwd=work)
        assert result.returncode == 0, result.stderr
        assert cli("collect", cwd=work).returncode == 0
        return work, run_dirs(work / "hpcprof-runs")

    def unreadable(command: str) -> Callable[[], str]:
        def run() -> str:
            work, [first, second] = sweep_work()
            first.chmod(0)
            try:
                result = subprocess.run([*PLAIN_USER, sys.executable, "-m", "hpcprof", command], cwd=work,
                                        capture_output=True, text=True, timeout=300)
            finally:
                first.chmod(0o755)
            if "Traceback" in result.stderr:
                return TRACEBACK
            if first.name not in result.stderr + result.stdout:
                return ACCEPTED
            if command == "collect" and result.returncode != 3:
                return f"{OTHER} (collect exit {result.returncode})"
            return HANDLED
        return run

    def timezone() -> str:
        work = rs.fresh()
        exp = write_exp(work / "e.yaml", ["true"])
        for zone in ("Etc/GMT-12", "Etc/GMT+12"):     # UTC+12, then UTC-12: the later sweep's id sorts first
            result = cli("submit", str(exp), "--wait", cwd=work, env={"TZ": zone})
            assert result.returncode == 0, result.stderr
        assert cli("collect", cwd=work).returncode == 0
        newest = max(run_dirs(work / "hpcprof-runs"),
                     key=lambda r: json.loads((r / "submission.json").read_text())["submitted_at"])
        result = cli("report", cwd=work)
        if result.returncode != 0:
            return one_line(result)
        return HANDLED if newest.name in result.stdout else ACCEPTED

    def same_id_twice() -> str:
        work = rs.fresh()
        assert cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work).returncode == 0
        [run] = run_dirs(work / "hpcprof-runs")
        shutil.copytree(run, work / "hpcprof-runs" / "other" / run.name)
        result = cli("status", cwd=work)
        if "Traceback" in result.stderr:
            return TRACEBACK
        said = [line for line in result.stderr.splitlines() if run.name in line and "other" in line]
        return HANDLED if said else ACCEPTED

    return [("unreadable run directory: status", unreadable("status")),
            ("unreadable run directory: collect", unreadable("collect")),
            ("unreadable run directory: report", unreadable("report")),
            ("unreadable run directory: compare", unreadable("compare")),
            ("a timezone change: report's latest sweep", timezone),
            ("one run id in two experiments", same_id_twice)]


# ---- class 6: tracebacks (other than rich markup) ------------------------------------------------

def traceback_cases(rs: Runs) -> list[Case]:
    def out_of_range(value: float) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            shutil.copyfile(rs.torch_rank(0), work / "rank0.json.gz")

            def change(event: dict[str, Any]) -> None:
                if "ts" in event:
                    event["ts"] = value
            edit_trace(rs.torch_rank(1), work / "rank1.json.gz", change)
            return named_refusal(cli("trace", "critical-path", "rank0.json.gz", "rank1.json.gz", cwd=work), "rank1.json.gz")
        return run

    def foreign_store(command: str) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            exp = write_exp(work / "e.yaml", ["true"])
            assert cli("submit", str(exp), "--wait", cwd=work).returncode == 0
            for path in (work / "hpcprof-runs").glob("hpcprof.db*"):
                if os.geteuid() == 0:       # another user's: nobody's (not root: one's own, read-only)
                    os.chown(path, 65534, 65534)
                path.chmod(0o444)
            for path in (work / "hpcprof-runs").rglob("state.stored"):
                path.unlink()
            args = {"submit": ["submit", "e.yaml"], "collect": ["collect"], "status": ["status"]}[command]
            result = subprocess.run([*PLAIN_USER, sys.executable, "-m", "hpcprof", *args], cwd=work,
                                    capture_output=True, text=True, timeout=300)
            if "Traceback" in result.stderr:
                return TRACEBACK
            if command == "submit":
                return worst(one_line(result), LEFT if len(run_dirs(work / "hpcprof-runs")) > 1 else HANDLED)
            return HANDLED if result.returncode in (0, 2, 3) else OTHER
        return run

    def symlink_loop(commands: list[list[str]]) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            write_exp(work / "e.yaml", ["true"])
            (work / "a").symlink_to("b")
            (work / "b").symlink_to("a")
            return worst(*(one_line(cli(*args, "--workdir", "a", cwd=work)) for args in commands))
        return run

    def old_schema() -> str:
        work = rs.fresh()
        (work / "w").mkdir()
        with sqlite3.connect(work / "w" / "hpcprof.db") as conn:   # runs as an older hpcprof made them
            conn.execute("CREATE TABLE sweeps (sweep_id VARCHAR(64) PRIMARY KEY, experiment VARCHAR(128) NOT NULL, "
                         "site VARCHAR(128) NOT NULL, spec JSON NOT NULL, created_at FLOAT NOT NULL)")
            conn.execute("CREATE TABLE runs (run_id VARCHAR(80) PRIMARY KEY, sweep_id VARCHAR(64) NOT NULL, "
                         "point_index INTEGER NOT NULL, params JSON NOT NULL, experiment VARCHAR(128) NOT NULL, "
                         "site VARCHAR(128) NOT NULL, run_dir TEXT NOT NULL, state VARCHAR(32) NOT NULL, "
                         "exit_code INTEGER, collected_at FLOAT)")
        result = cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--workdir", "w", cwd=work)
        return worst(one_line(result), LEFT if run_dirs(work / "w") else HANDLED)

    def malformed(sql: str, commands: list[str]) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            shutil.copyfile(rs.nsys_rank(1), work / "rank1.sqlite")
            with sqlite3.connect(work / "rank1.sqlite") as conn:
                conn.execute(sql)
            outcomes = []
            for command in commands:
                result = cli("nsys", *command.split(), "rank1.sqlite", cwd=work)
                outcomes.append(one_line(result) if result.returncode != 0 else
                                f"{ACCEPTED} (nsys {command})")
            return worst(*outcomes)
        return run

    every = ["nccl", "overlap", "gaps", "phases", "critical-path", "stats -r cuda_gpu_kern_sum", "analyze"]
    reads_nvtx = ["phases", "critical-path"]
    return [
        ("trace critical-path: timestamps of 1e300 µs", out_of_range(1e300)),
        ("trace critical-path: timestamps of -1e300 µs", out_of_range(-1e300)),
        ("a store of another user: submit", foreign_store("submit")),
        ("a store of another user: status", foreign_store("status")),
        ("a store of another user: collect", foreign_store("collect")),
        ("--workdir a symlink loop: status, collect, report, compare",
         symlink_loop([["status"], ["collect"], ["report"], ["compare"]])),
        ("--workdir a symlink loop: submit", symlink_loop([["submit", "e.yaml"]])),
        ("an older store schema at submit", old_schema),
        ("nsys: text in a kernel's start", malformed("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' "
                                                     "WHERE rowid = 1", every)),
        ("nsys: text in an NVTX range's start", malformed("UPDATE NVTX_EVENTS SET start = 'x' WHERE rowid = 3",
                                                          reads_nvtx)),
        ("nsys: text in a CUDA call's correlation id",
         malformed("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'x' WHERE rowid = 1", every[:5])),
        ("nsys: fractional kernel timestamps", malformed("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5 "
                                                         "WHERE rowid = 1", ["analyze"])),
    ]


# ---- class 8: smaller ---------------------------------------------------------------------------

def smaller_cases(rs: Runs) -> list[Case]:
    def many_ranks() -> str:
        work, run_dir = rs.run("nsys", {f"rank{r}.sqlite": rs.nsys_rank(r % 2) for r in range(3)}, 10_000)
        result, status, note = collected(work)
        lines = [line for line in (result.stdout + result.stderr).splitlines() if "rank" in line and run_dir.name in line]
        outcome = partial_naming(result, status, note, "9,997")
        if outcome != HANDLED:
            return outcome
        return HANDLED if len(lines) <= 3 else f"{OTHER} ({len(lines)} lines)"

    def ascii_stdout() -> str:
        work = rs.fresh()

        def accented(event: dict[str, Any]) -> None:
            if event.get("cat") == "kernel" and str(event.get("name", "")).startswith("nvjet"):
                event["name"] = "gemm_café"
        edit_trace(rs.torch_rank(0), work / "rank0.json.gz", accented)
        outcomes = []
        for fmt in ("table", "csv", "json"):
            result = cli("trace", "kernels", "rank0.json.gz", "--format", fmt, cwd=work,
                         env={"PYTHONIOENCODING": "ascii"})
            outcomes.append(HANDLED if result.returncode == 0 and "gemm_caf" in result.stdout
                            else TRACEBACK if "Traceback" in result.stderr
                            else f"{OTHER} ({fmt}: {' '.join(result.stderr.split())[-120:]})")
        return worst(*outcomes)

    def pre_1970() -> str:
        work = rs.fresh()
        shutil.copyfile(rs.torch_rank(0), work / "rank0.json.gz")
        edit_trace(rs.torch_rank(1), work / "rank1.json.gz", shifted(-2e15))
        result = cli("trace", "critical-path", "rank0.json.gz", "rank1.json.gz", cwd=work)
        if "Traceback" in result.stderr:
            return TRACEBACK
        if "ProfilerStep" in result.stderr:
            return f"{OTHER} (blamed on the steps: {' '.join(result.stderr.split())[-160:]})"
        return named_refusal(result, "rank1.json.gz", "negative")

    def umask_077() -> str:
        work = rs.fresh()
        write_exp(work / "e.yaml", ["true"])
        command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "hpcprof", "render", "e.yaml", "-o", "out"])
        result = subprocess.run(["sh", "-c", f"umask 077; exec {command}"], cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            return one_line(result)
        modes = {p.name: p.stat().st_mode & 0o777 for p in (work / "out").iterdir() if p.is_file()}
        loose = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
        return HANDLED if not loose else f"{OTHER} ({loose})"

    def bom_crlf() -> str:
        work = rs.fresh()
        data = rs.fixture(NCU).read_bytes()
        (work / "rank0.csv").write_bytes(b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))
        expected = cli("ncu", "metrics", str(rs.fixture(NCU)), "--format", "csv", cwd=work)
        result = cli("ncu", "metrics", "rank0.csv", "--format", "csv", cwd=work)
        if result.returncode != 0:
            return f"{OTHER} (refused: {result.stderr.strip().splitlines()[0][:160]})"
        return HANDLED if result.stdout == expected.stdout else f"{LOST} (other rows than the plain CSV's)"

    def launcher_missing() -> str:
        work = rs.fresh()
        (work / "s.yaml").write_text("name: s\nscheduler: local\nlauncher: {kind: mpiexec, flavor: hydra, "
                                     "command: /nonexistent/bin/mpiexec}\n")
        result = cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--site-file", "s.yaml", cwd=work)
        return worst(one_line(result), LEFT if (work / "hpcprof-runs").exists() else HANDLED,
                     HANDLED if "launcher" in result.stderr else f"{OTHER} (launcher.command not named)")

    def nul_extra_args() -> str:
        work = rs.fresh()
        exp = write_exp(work / "e.yaml", ["true"], 'profile:\n  tool: nsys\n  nsys:\n    extra_args: ["--x=a\\0b"]\n')
        result = cli("render", str(exp), "-o", "out", cwd=work)
        if (work / "out" / "rank_wrapper.sh").exists() and b"\x00" in (work / "out" / "rank_wrapper.sh").read_bytes():
            return f"{LOST} (a NUL byte written into rank_wrapper.sh)"
        return worst(one_line(result), HANDLED if "extra_args" in result.stderr else f"{OTHER} (the field not named)")

    def disk_full(free: int) -> Callable[[], str]:
        def run() -> str:
            work = rs.fresh()
            write_exp(work / "e.yaml", ["true"], "sweep:\n  env.A: [x, y]\n")
            result, left = full_disk(work, free, ["submit", "e.yaml", "--workdir", "full/w"])
            if left:
                return f"{LEFT} ({', '.join(left[:4])})"
            return one_line(result)
        return run

    return [("10,000 ranks declared, 3 files", many_ranks),
            ("an ASCII-only stdout", ascii_stdout),
            ("pre-1970 timestamps: trace critical-path", pre_1970),
            ("job.sh under umask 077", umask_077),
            ("an ncu CSV with a BOM and CRLF", bom_crlf),
            ("a missing launcher.command at submit", launcher_missing),
            ("a NUL byte in nsys.extra_args", nul_extra_args),
            ("submit on a full disk, the store refused", disk_full(16384)),
            ("submit on a full disk, the run directories refused", disk_full(131072))]


def silent_cases(tmp: Path, fixtures: Path) -> list[Case]:
    rs = Runs(tmp, fixtures)
    groups = {"5 silent": [*rank_set_cases(rs), *clock_cases(rs), *workdir_cases(rs)],
              "6 traceback": traceback_cases(rs), "8 smaller": smaller_cases(rs)}
    return [(f"{group}: {label}", case) for group, cases in groups.items() for label, case in cases]

