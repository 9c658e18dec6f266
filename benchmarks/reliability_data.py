"""The `data` group of benchmarks/reliability.py: forensics records and steps files are data that
any process of the job (or a copy from another job) may have written.

One real local run (2 ranks under MPICH's Hydra: rank 1 ends with os._exit(3), rank 0 a little later)
is copied for each case and its forensics or steps files forged as a hostile or broken job would:
another rank's or another job's records, ranks outside the world, names with non-ASCII digits or a
leading zero, 20,000 unreadable dumps, escape sequences and rich markup in an exception, hostile
Flight Recorder values (10^12 collectives, 3 M ranks, deep nesting, wrong types), a `derived/`
link out of the run, damaged steps lines, stray steps files, a 300 MB line without a newline, a
steps file changed after a collect. Classes: forensics (`status`, `logs --hang`), steps (`collect`),
leftovers (YAML alias bombs and merge keys; `bench ceilings --out`, `--sizes-from`, sizes it cannot
allocate, `--device cuda` without a GPU).
A forged record or line counts as handled when a line names what was refused or left out and the
command printed no traceback; used without a word it is `accepted in silence`.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from reliability_common import ACCEPTED, BLOCKED, HANDLED, LOST, OTHER, TRACEBACK, cli, one_line, write_exp

Case = tuple[str, Callable[[], str]]
#: rank 1 ends on os._exit(3) after half a second, rank 0 after its own short sleep: Hydra does not stop a
#: rank beside one that ends before MPI_Init, and its proxy spins on a CPU while it waits for that rank
PROGRAM = ["python", "-c", "import os, time; time.sleep(0.5); os._exit(3) if os.environ['PMI_RANK'] == '1' "
           "else time.sleep(3)"]
HEADER = {"rank": 0, "pid": 11, "host": "h", "tool": "none", "skip": 1, "steps": 3}


class Base:
    """The one real run every case copies (made once)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.lock, self.run = tmp, threading.Lock(), None  # type: ignore[var-annotated]

    def copy(self) -> tuple[Path, Path]:
        """A workdir of its own holding a copy of the run: (the case's directory, the run directory)."""
        with self.lock:
            if self.run is None:
                work = Path(tempfile.mkdtemp(prefix="base", dir=self.tmp))
                exp = write_exp(work / "e.yaml", PROGRAM, "")
                exp.write_text(exp.read_text().replace("ranks_per_node: 1", "ranks_per_node: 2"))
                cli("submit", str(exp), "--site", "local", "--wait", cwd=work, timeout=120)
                [self.run] = [p.parent for p in (work / "hpcprof-runs").glob("*/*/config.json")]
        case = Path(tempfile.mkdtemp(dir=self.tmp))
        run = case / "hpcprof-runs" / "t" / self.run.name
        shutil.copytree(self.run, run, symlinks=True)
        shutil.rmtree(run / "derived", ignore_errors=True)
        (run / "derived").mkdir()
        return case, run


def job_times(run: Path) -> tuple[float, float]:
    status = dict(line.split("=", 1) for line in (run / "status").read_text().splitlines() if "=" in line)
    return float(status["start"]), float(status["end"])


def dump(rank: int, run: Path, entries: list[dict[str, Any]] | None = None, **note: Any) -> bytes:
    start, _ = job_times(run)
    made = int((start + 1) * 1e9)
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                         "entries": entries if entries is not None else [
                             {"process_group": ("0", "default_pg"), "collective_seq_id": 1,
                              "profiling_name": "gloo:all_reduce", "input_sizes": [[4]], "state": "scheduled",
                              "retired": True, "time_created_ns": made}],
                         "hpcprof": {"rank": rank, "time_ns": made, "reason": "forged", **note}})


def exception(rank: int, run: Path, **fields: Any) -> str:
    start, _ = job_times(run)
    return json.dumps({"rank": rank, "pid": 4242, "host": "h", "time": start + 1, "type": "ValueError",
                       "message": "FORGED-MARK", "frames": [["/x/train.py", 3, "main"]], **fields})


def stacks(rank: int, run: Path, pid: int = 4242) -> str:
    start, _ = job_times(run)
    return f"# hpcprof: rank {rank} pid {pid} host h started {start + 0.5:.3f}\n"


def hang(case: Path, run: Path, timeout: float = 60) -> subprocess.CompletedProcess[str] | None:
    try:
        return cli("logs", run.name, "--hang", cwd=case, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def judged(result: subprocess.CompletedProcess[str] | None, refused: str = "refused", mark: str = "FORGED-MARK") -> str:
    """HANDLED: a line says `refused` and the forged record's `mark` is not used; else what happened."""
    if result is None:
        return BLOCKED + " (past its time)"
    out = result.stdout + result.stderr
    if "Traceback" in out:
        return TRACEBACK
    if result.returncode != 0:
        return OTHER + f" (exit {result.returncode})"
    return HANDLED if refused in out and mark not in out else ACCEPTED


def forensics_cases(base: Base) -> list[Case]:
    def forged(files: Callable[[Path], dict[str, str | bytes]], refused: str = "refused") -> Callable[[], str]:
        def run_case() -> str:
            case, run = base.copy()
            for name, content in files(run).items():
                path = run / "forensics" / name
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
            return judged(hang(case, run), refused)
        return run_case

    def finishes(files: Callable[[Path], dict[str, str | bytes]]) -> Callable[[], str]:
        """Handled when `logs --hang` answers in time without a traceback (the input is a valid dump)."""
        def run_case() -> str:
            case, run = base.copy()
            for name, content in files(run).items():
                (run / "forensics" / name).write_bytes(content if isinstance(content, bytes) else content.encode())
            result = hang(case, run)
            return judged(result, "", "\0") if result is not None else BLOCKED + " (past its time)"
        return run_case

    def many_dumps() -> str:
        case, run = base.copy()
        for i in range(20_000):
            (run / "forensics" / f"fr_rank{i}").write_bytes(b"not a pickle")
        result = hang(case, run, 120)
        if result is None or "Traceback" in result.stdout + result.stderr:
            return judged(result)
        lines = [line for line in result.stdout.splitlines() if "fr_rank" in line and ("not read" in line or "refused" in line)]
        return HANDLED if len(lines) == 1 else ACCEPTED if not lines else OTHER + f" ({len(lines)} lines)"

    def escapes() -> str:
        case, run = base.copy()
        (run / "forensics" / "exception_rank1.json").write_text(exception(
            1, run, pid=None, message="\x1b]0;owned\x07\x1b[2J[bold red]boom[/bold red] [link=file:///etc]x[/link]"))
        result = cli("status", cwd=case)
        shown = hang(case, run)
        if "Traceback" in result.stdout + result.stderr or shown is None or "Traceback" in shown.stdout + shown.stderr:
            return TRACEBACK
        out = result.stdout + shown.stdout
        return HANDLED if "\x1b" not in out and "[bold red]" in result.stdout else ACCEPTED

    def os_exit() -> str:
        case, run = base.copy()
        result = cli("status", "--format", "json", cwd=case)
        if "Traceback" in result.stderr:
            return TRACEBACK
        reason = json.loads(result.stdout)[0]["reason"]
        return ACCEPTED + f" ({reason})" if "signal" in reason or "SIGKILL" in reason else HANDLED

    def one_bad_dump() -> str:
        case, run = base.copy()
        healthy = run.parent / (run.name + "-ok")
        shutil.copytree(run, healthy, symlinks=True)
        config = json.loads((healthy / "config.json").read_text())
        config["run_id"] = healthy.name
        (healthy / "config.json").write_text(json.dumps(config))
        entry = {"process_group": ("0",), "collective_seq_id": 1, "profiling_name": "gloo:all_reduce"}
        (run / "forensics" / "fr_rank0").write_bytes(dump(0, run, [entry]))
        result = cli("status", "--format", "json", cwd=case)
        if "Traceback" in result.stderr:
            return TRACEBACK
        rows = json.loads(result.stdout) if result.returncode == 0 else []
        return HANDLED if len(rows) == 2 else BLOCKED

    def derived_link() -> str:
        case, run = base.copy()
        outside = case / "outside"
        outside.mkdir()
        shutil.rmtree(run / "derived")
        (run / "derived").symlink_to(outside)
        result = cli("status", cwd=case)
        if "Traceback" in result.stderr:
            return TRACEBACK
        return LOST + " (forensics.json written through derived/)" if any(outside.iterdir()) else HANDLED

    def entries(*items: dict[str, Any]) -> Callable[[Path], dict[str, str | bytes]]:
        return lambda run: {"fr_rank0": dump(0, run, [{"process_group": ("0", "default_pg"), "collective_seq_id": 1,
                                                       "profiling_name": "gloo:all_reduce", "input_sizes": [[4]],
                                                       "retired": True, **item} for item in items])}

    def deep(run: Path) -> dict[str, str | bytes]:
        """input_sizes nested 5,000 deep (written as pickle opcodes: pickle itself recurses)."""
        data = pickle.dumps(pickle.loads(dump(0, run, [{"process_group": ("0", "default_pg"), "collective_seq_id": 1,
                                                        "profiling_name": "gloo:all_reduce", "input_sizes": "DEEP"}])),
                            protocol=2)     # no frames: the opcodes can be replaced
        return {"fr_rank0": data.replace(b"X\x04\x00\x00\x00DEEP", b"]" * 5000 + b"K\x04" + b"a" * 5000)}

    def shared_dag(run: Path) -> dict[str, str | bytes]:
        level: Any = [1, 2]
        for _ in range(10):
            level = [level] * 100
        return {"fr_rank0": dump(0, run, [{"process_group": ("0", "default_pg"), "collective_seq_id": 1,
                                           "profiling_name": "gloo:all_reduce", "input_sizes": [[4]], "frames": level}])}

    def three_million(run: Path) -> dict[str, str | bytes]:
        data = pickle.loads(dump(0, run))
        data["pg_config"]["0"]["ranks"] = str(list(range(3_000_000)))
        return {"fr_rank0": pickle.dumps(data)}

    def start(run: Path) -> float:
        return job_times(run)[0]

    return [
        ("class forensics: an exception record of another rank", forged(lambda r: {"exception_rank1.json": exception(0, r)})),
        ("class forensics: an exception record of another job (a day older)",
         forged(lambda r: {"exception_rank1.json": exception(1, r, pid=None, time=start(r) - 86400)})),
        ("class forensics: an exception record of another process",
         forged(lambda r: {"stacks_rank1.txt": stacks(1, r, 777), "exception_rank1.json": exception(1, r, pid=999)})),
        ("class forensics: a stacks file naming another rank", forged(lambda r: {"stacks_rank1.txt": stacks(0, r)})),
        ("class forensics: a stacks file of another job",
         forged(lambda r: {"stacks_rank1.txt": stacks(1, r).replace(f"{start(r) + 0.5:.3f}", f"{start(r) - 7200:.3f}")})),
        ("class forensics: an exception record of rank 5 in a world of 2",
         forged(lambda r: {"exception_rank5.json": exception(5, r)})),
        ("class forensics: a dump of rank 5 in a world of 2", forged(lambda r: {"fr_rank5": dump(5, r)})),
        ("class forensics: a dump named with a non-ASCII digit", forged(lambda r: {"fr_rank\u0661": dump(1, r)})),
        ("class forensics: a dump named with a leading zero", forged(lambda r: {"fr_rank01": dump(1, r)})),
        ("class forensics: an exception record named with a leading zero",
         forged(lambda r: {"exception_rank01.json": exception(1, r)})),
        ("class forensics: a dump of rank 0 in rank 1's file", forged(lambda r: {"fr_rank1": dump(0, r)})),
        ("class forensics: a dump of another job (a day older)",
         forged(lambda r: {"fr_rank1": dump(1, r, time_ns=int((start(r) - 86400) * 1e9))})),
        ("class forensics: a dump whose sequence number is text", forged(entries({"collective_seq_id": "7"}))),
        ("class forensics: a dump whose sequence number is true", forged(entries({"collective_seq_id": True}))),
        ("class forensics: a dump with 10^12 collectives",
         finishes(entries({"collective_seq_id": 1}, {"collective_seq_id": 10 ** 12, "input_sizes": [[2]]}))),
        ("class forensics: a dump naming 3 M ranks", forged(three_million)),
        ("class forensics: a dump nested 5,000 deep", forged(deep, "not a Flight Recorder dump")),
        ("class forensics: a dump of shared lists (100^10 values)", forged(shared_dag, "not a Flight Recorder dump")),
        ("class forensics: a dump whose sizes are text", forged(entries({"input_sizes": "[[4]] FORGED"}))),
        ("class forensics: 20,000 unreadable dumps", many_dumps),
        ("class forensics: escape sequences and rich markup in an exception", escapes),
        ("class forensics: a rank that ends with os._exit(3)", os_exit),
        ("class forensics: one bad dump among two runs: status", one_bad_dump),
        ("class forensics: status with derived/ a link out of the run", derived_link),
    ]


def steps_line(step: int, ns: Any = 10) -> str:
    return json.dumps({"step": step, "end_ns": 1000 + step, "ns": None if step == 1 else ns}) + "\n"


def steps_cases(base: Base) -> list[Case]:
    def collected(files: Callable[[Path], None], said: str, rank1_kept: bool = False) -> Callable[[], str]:
        """Collect the run with its steps files as `files` writes them: handled when a line with `said`
        names what was left out (and, `rank1_kept`, rank 1's steps were kept)."""
        def run_case() -> str:
            case, run = base.copy()
            (run / "steps").mkdir()
            for rank in (0, 1):
                (run / "steps" / f"rank{rank}.jsonl").write_text(
                    json.dumps({**HEADER, "rank": rank}) + "\n" + "".join(steps_line(n) for n in (1, 2, 3, 4)))
            files(run)
            try:
                result = cli("collect", run.name, cwd=case, timeout=120)
            except subprocess.TimeoutExpired:
                return BLOCKED + " (past its time)"
            out = result.stdout + result.stderr
            if "Traceback" in out:
                return TRACEBACK
            lines = [line for line in out.splitlines() if said in line]
            if rank1_kept:
                import pandas as pd

                table = run / "results" / "steps_times.parquet"
                if not table.exists() or 1 not in set(pd.read_parquet(table)["rank"]):
                    return LOST + " (rank 1's steps dropped)"
            return HANDLED if len(lines) == 1 else ACCEPTED if not lines else OTHER + f" ({len(lines)} lines)"
        return run_case

    def lines(*text: str) -> Callable[[Path], None]:
        def write(run: Path) -> None:
            with open(run / "steps" / "rank0.jsonl", "a") as fh:
                fh.writelines(text)
        return write

    def raw(step: int, ns: str) -> str:
        return f'{{"step": {step}, "end_ns": 99, "ns": {ns}}}\n'

    def named(name: str, content: Callable[[Path], str]) -> Callable[[Path], None]:
        return lambda run: (run / "steps" / name).write_text(content(run))

    def copy_of(run: Path) -> str:
        return (run / "steps" / "rank0.jsonl").read_text()

    def huge(run: Path) -> None:
        with open(run / "steps" / "rank0.jsonl", "a") as fh:
            fh.truncate(os.path.getsize(run / "steps" / "rank0.jsonl") + (300 << 20))

    def skewed(off_s: int) -> Callable[[Path], None]:
        """Both ranks' steps at the job's time, rank 1's as its host clock `off_s` seconds off rank 0's writes them."""
        def write(run: Path) -> None:
            start = int(job_times(run)[0] * 1e9)
            for rank, off in ((0, 0), (1, off_s * 10 ** 9)):
                (run / "steps" / f"rank{rank}.jsonl").write_text(json.dumps({**HEADER, "rank": rank}) + "\n" + "".join(
                    json.dumps({"step": n, "end_ns": start + n * 10 ** 8 + off, "ns": None if n == 1 else 10 ** 8}) + "\n"
                    for n in (1, 2, 3, 4)))
        return write

    def from_one(run: Path) -> None:
        """rank1.jsonl and rank2.jsonl in a world of 2 (a launcher that counts ranks from 1)."""
        steps = run / "steps"
        (steps / "rank1.jsonl").rename(steps / "rank2.jsonl")
        (steps / "rank0.jsonl").rename(steps / "rank1.jsonl")

    def recollect() -> str:
        case, run = base.copy()
        (run / "steps").mkdir()
        path = run / "steps" / "rank0.jsonl"
        path.write_text(json.dumps(HEADER) + "\n" + "".join(steps_line(n) for n in (1, 2, 3)))
        cli("collect", cwd=case, timeout=120)
        time.sleep(0.05)
        with open(path, "a") as fh:
            fh.write(steps_line(4))
        again = cli("collect", cwd=case, timeout=120)
        if "Traceback" in again.stdout + again.stderr:
            return TRACEBACK
        import pandas as pd

        table = run / "results" / "steps_times.parquet"
        steps = len(pd.read_parquet(table)) if table.exists() else 0
        return HANDLED if steps == 4 else ACCEPTED + f" ({steps} steps kept: {again.stdout.strip()[:80]})"

    return [
        ("class steps: a NaN duration", collected(lines(raw(5, "NaN")), "NaN")),
        ("class steps: an infinite duration", collected(lines(raw(5, "Infinity")), "infinite")),
        ("class steps: a negative duration", collected(lines(raw(5, "-3")), "negative")),
        ("class steps: a duration as text", collected(lines(raw(5, '"12"')), "text")),
        ("class steps: a fractional duration", collected(lines(raw(5, "1.5")), "fractional")),
        ("class steps: step number -1", collected(lines(raw(-1, "5")), "step number")),
        ("class steps: step number 10^30", collected(lines(raw(10 ** 30, "5")), "step number")),
        ("class steps: a duplicate line", collected(lines(steps_line(4)), "seen before")),
        ("class steps: a line without end_ns; rank 1 kept",
         collected(lines('{"step": 5, "ns": 4}\n'), "end time", rank1_kept=True)),
        ("class steps: a header naming another rank",
         collected(named("rank0.jsonl", lambda r: json.dumps({**HEADER, "rank": 1}) + "\n" + steps_line(1)),
                   "another rank", rank1_kept=True)),
        ("class steps: a stray copy rank0 (copy).jsonl", collected(named("rank0 (copy).jsonl", copy_of), "copy")),
        ("class steps: a stray copy rank00.jsonl", collected(named("rank00.jsonl", copy_of), "rank00")),
        ("class steps: rank 7 in a world of 2",
         collected(named("rank7.jsonl", lambda r: json.dumps({**HEADER, "rank": 7}) + "\n" + steps_line(1)), "rank7")),
        ("class steps: a 300 MB line without a newline", collected(huge, "rank0.jsonl")),
        ("class steps: a steps file changed after a collect: collect again", recollect),
        ("class steps: rank 1's host clock 100 s ahead", collected(skewed(100), "rank 1's clock is 100.0 s ahead")),
        ("class steps: rank 1's host clock 1 h behind", collected(skewed(-3600), "rank 1's clock is 3,600.0 s behind")),
        ("class steps: files numbered from 1 (rank1, rank2 in a world of 2)", collected(from_one, "numbered from 1")),
    ]


EXPERIMENT = 'name: t\nworkload:\n  kind: command\n  argv: ["true"]\n'


def bomb(under: str) -> str:
    """An alias bomb of 9^9 values in 9 lines under `under`."""
    lines = [f"  a: &a [{', '.join(['lol'] * 9)}]"]
    lines += [f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    return f"{under}:\n" + "\n".join(lines) + "\n"


MERGES = "x0: &x0 {k0: 1, k1: 2}\n" + "".join(f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}, *x{i - 1}], k{i}: 1}}\n"
                                             for i in range(1, 20))


def leftover_cases(tmp: Path) -> list[Case]:
    def yaml_case(text: str) -> Callable[[], str]:
        def run_case() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            (work / "e.yaml").write_text(EXPERIMENT + text)
            try:
                result = cli("render", "e.yaml", "--site", "local", "-o", "out", cwd=work, timeout=60)
            except subprocess.TimeoutExpired:
                return BLOCKED + " (past its time)"
            return one_line(result)
        return run_case

    def out_case(target: str, make: Callable[[Path], None]) -> Callable[[], str]:
        """bench ceilings --sizes-from e.yaml --out `target` (made by `make`): handled when refused and nothing changed."""
        def run_case() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            (work / "e.yaml").write_text(EXPERIMENT)
            make(work)
            files = {p: p.read_bytes() for p in work.rglob("*") if p.is_file() and not p.is_symlink()}
            try:
                result = cli("bench", "ceilings", "--sizes-from", "e.yaml", "--gemm", "64,64,64", "--iters", "1",
                             "--warmup", "0", "--device", "cpu", "--out", target, cwd=work, timeout=120)
            except subprocess.TimeoutExpired:
                return BLOCKED + " (past its time)"
            changed = [p for p, data in files.items() if not p.exists() or p.read_bytes() != data]
            return LOST + f" ({changed[0].name} replaced)" if changed else one_line(result)
        return run_case

    def device_node(work: Path) -> None:
        """A null device of the case's own (as root; else /dev/null, which a plain user cannot replace):
        a command that replaces its output by a rename must never be given the system's /dev/null as root."""
        if os.geteuid() == 0:
            os.mknod(work / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    device = "null" if os.geteuid() == 0 else "/dev/null"

    def run_dir(work: Path) -> None:
        (work / "run").mkdir()
        (work / "run" / "config.json").write_text("{}")
        (work / "run" / "job.sh").write_text("#!/bin/sh\n")

    def store(work: Path) -> None:
        import sqlite3

        conn = sqlite3.connect(work / "hpcprof.db")
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()

    def sizes_from(source: str, make: Callable[[Path], None]) -> Callable[[], str]:
        def run_case() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            make(work)
            try:
                return one_line(cli("bench", "ceilings", "--sizes-from", source, cwd=work, timeout=30))
            except subprocess.TimeoutExpired:
                return BLOCKED + " (waited on it)"
        return run_case

    def ceilings(*args: str) -> Callable[[], str]:
        def run_case() -> str:
            work = Path(tempfile.mkdtemp(dir=tmp))
            return one_line(cli("bench", "ceilings", *args, "--iters", "1", "--warmup", "0", "--out", "c.json",
                                cwd=work, timeout=120))
        return run_case

    def full_disk() -> str:
        """collect onto a store (--db) on a 2 MB tmpfs filled to its last byte: handled when one line says
        so (exit 2) and the store's bytes are unchanged."""
        work = Path(tempfile.mkdtemp(dir=tmp))
        cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--site", "local", "--wait", cwd=work, timeout=120)
        [run] = [p.parent for p in (work / "hpcprof-runs").glob("*/*/config.json")]
        (run / "steps").mkdir()
        (run / "steps" / "rank0.jsonl").write_text(json.dumps(HEADER) + "\n" + "".join(steps_line(n) for n in (1, 2)))
        disk = work / "disk"
        disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
        try:
            with closing(sqlite3.connect(work / "hpcprof-runs" / "hpcprof.db")) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copyfile(work / "hpcprof-runs" / "hpcprof.db", disk / "s.db")
            before = (disk / "s.db").read_bytes()
            with open(disk / "fill", "wb", buffering=0) as fh:
                try:
                    while fh.write(b"\0" * 1024):
                        pass
                except OSError:     # the disk is full
                    pass
            result = cli("collect", "--db", f"sqlite:///{disk / 's.db'}", cwd=work, timeout=120)
            changed = (disk / "s.db").read_bytes() != before
        finally:
            subprocess.run(["umount", str(disk)], check=False)
        if changed:
            return LOST + " (the store changed)"
        said = one_line(result)
        return said if said != HANDLED or "free" in result.stderr else OTHER + f" (said: {result.stderr.strip()[:90]})"

    def ascii_terminal() -> str:
        """status, report and logs --hang of a run whose program raised `µs → × é 中`, under
        PYTHONIOENCODING=ascii: handled when every byte is ASCII and the message reads `us -> x e \\u4e2d`
        (no UTF-8 bytes on an ASCII stream, no `\\xb5`-style escapes, no traceback)."""
        work = Path(tempfile.mkdtemp(dir=tmp))
        cli("submit", str(write_exp(work / "e.yaml", ["python", "-c", "raise ValueError('\u00b5s \u2192 \u00d7 \u00e9 \u4e2d')"])),
            "--site", "local", "--wait", cwd=work, timeout=120)
        [run] = [p.parent for p in (work / "hpcprof-runs").glob("*/*/config.json")]
        for args in (["status"], ["report"], ["logs", run.name, "--hang"]):
            result = subprocess.run([sys.executable, "-m", "hpcprof", *args], cwd=work, capture_output=True,
                                    timeout=120, env={**os.environ, "PYTHONIOENCODING": "ascii"})
            if b"Traceback" in result.stderr or b"UnicodeEncodeError" in result.stdout:
                return TRACEBACK
            out = result.stdout + result.stderr
            if not out.isascii() or b"us -> x e \\u4e2d" not in out:
                return ACCEPTED + f" ({args[-1]}: {'UTF-8 bytes' if not out.isascii() else 'escapes'})"
        return HANDLED

    cases = [
        ("class leftovers: a YAML alias bomb under an unknown key", yaml_case(bomb("unknown"))),
        ("class leftovers: a YAML alias bomb in sweep", yaml_case(bomb("sweep"))),
        ("class leftovers: 800 bytes of YAML merge keys", yaml_case(MERGES)),
        ("class leftovers: bench ceilings --out the campaign store", out_case("hpcprof.db", store)),
        ("class leftovers: bench ceilings --out a run's config.json", out_case("run/config.json", run_dir)),
        ("class leftovers: bench ceilings --out its own --sizes-from", out_case("e.yaml", lambda w: None)),
        ("class leftovers: bench ceilings --out a FIFO", out_case("fifo", lambda w: os.mkfifo(w / "fifo"))),
        ("class leftovers: bench ceilings --out a device node", out_case(device, device_node)),
        ("class leftovers: bench ceilings --out a link",
         out_case("link", lambda w: (w / "link").symlink_to(w / "e.yaml"))),
        ("class leftovers: bench ceilings --sizes-from a FIFO", sizes_from("fifo", lambda w: os.mkfifo(w / "fifo"))),
        ("class leftovers: bench ceilings --sizes-from /dev/zero", sizes_from("/dev/zero", lambda w: None)),
        ("class leftovers: bench ceilings --sizes-from an alias bomb under the workload's args",
         sizes_from("e.yaml", lambda w: (w / "e.yaml").write_text(
             "name: t\nworkload:\n  kind: seqpar\n  args:\n    sequence_length: 64\n"
             + bomb("    bomb").replace("\n  ", "\n      ")))),
        ("class leftovers: bench ceilings a GEMM of 4 TB", ceilings("--gemm", "1000000,1000000,1000000",
                                                                    "--device", "cpu")),
    ]
    cases.append(("class leftovers: an ASCII terminal: status, report, logs --hang", ascii_terminal))
    if os.geteuid() == 0:       # mounts its tmpfs
        cases.append(("class leftovers: collect onto a store on a full disk", full_disk))
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        cases.append(("class leftovers: bench ceilings --device cuda without a GPU",
                      ceilings("--gemm", "64,64,64", "--device", "cuda")))
    return cases


def data_cases(tmp: Path, fixtures: Path) -> list[Case]:
    base = Base(tmp)
    return forensics_cases(base) + steps_cases(base) + leftover_cases(tmp)


if __name__ == "__main__":
    sys.exit("run through benchmarks/reliability.py --group data")
