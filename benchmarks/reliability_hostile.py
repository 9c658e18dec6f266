"""The `hostile` group of benchmarks/reliability.py: what a careless or hostile user, or
hostile profile text, can make hpcprof do. Six classes, each label starting `class N:`:

  1  written or deleted outside the run directory through a symlink (results/, derived/, parts/,
     the template cache)
  2  an output that replaces the workdir's own files (the store and its -wal, a run's config.json,
     a rank export, headline.json, a result table, a job log), one of the command's inputs, a
     special file (FIFO, character device), a symlink or a directory
  3  spreadsheet formulas from profile text (CSV and Echo's .xlsx: cells starting = + - @ tab CR)
  4  hangs and unbounded reads: a FIFO or /dev/zero where a run file or a profile should be, a
     gzip bomb, collect workers left running when collect is killed (and the next collect's result)
  6  rich markup ([/], [bold]) in kernel names, NVTX ranges, swept values, log lines: tracebacks
  7  hostile text reaching a person: terminal escape sequences and rich [link=...] on a terminal
     (commands run on a pseudo-terminal), live <a href> links in the HTML report

Every case runs the real CLI on real local runs and real nsys, torch and ncu exports whose names
were rewritten with the hostile text. A case that does not end in its time, or whose process grows
past MEMORY_MB, is killed (counted `blocked`: it held up everything after it).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import select
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from reliability_common import (
    ACCEPTED,
    BLOCKED,
    HANDLED,
    LEFT,
    LOST,
    OTHER,
    TRACEBACK,
    cli,
    one_line,
    run_dirs,
    write_exp,
)
from reliability_faults import Fixtures, digest, exit_class

Case = tuple[str, Callable[[], str]]
REPO = Path(__file__).resolve().parents[1]
#: a process above this resident size is counted as reading without bound (and killed)
MEMORY_MB = 1024
#: seconds before a command is counted as hung (and killed)
HANG_S = 40

MARKUP = "[/][bold]x[/bold]"
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m"
LINK = "[link=https://evil.example/l]click[/link]"
FORMULA = '=HYPERLINK("https://evil.example/f","x")'
HTML = '<a href="https://evil.example/h">x</a>'
#: what must never reach a terminal: the payload's own sequences (rich's colours are fine)
TERMINAL_BAD = ("\x1b]0;owned", "\x1b[2J", "\x1b]8;")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


# ---- hostile inputs ------------------------------------------------------------------------------

def hostile_export(source: Path, target: Path, payload: str, suffix: bool = False) -> Path:
    """A copy of an nsys export whose kernel names and NVTX ranges start with `payload` (end with
    it: `suffix`, which keeps names such as nccl... recognised)."""
    shutil.copyfile(source, target)
    conn = sqlite3.connect(target)
    try:
        kernels = "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT shortName FROM " \
                  "CUPTI_ACTIVITY_KIND_KERNEL"
        joined = "value || ?" if suffix else "? || value"
        conn.execute(f"UPDATE StringIds SET value = {joined} WHERE id IN ({kernels})", (payload,))
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            conn.execute(f"UPDATE NVTX_EVENTS SET text = {joined.replace('value', 'text')} WHERE text IS NOT NULL",
                         (payload,))
        conn.commit()
    finally:
        conn.close()
    return target


def hostile_trace(source: Path, target: Path, payload: str, suffix: bool = False) -> Path:
    """A copy of a Kineto trace (.json.gz) whose kernel and annotation names start with `payload`
    (end with it: `suffix`)."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    for event in data["traceEvents"]:
        name = str(event.get("name", ""))
        if event.get("cat") in ("kernel", "gpu_user_annotation", "user_annotation") and \
                not name.startswith("ProfilerStep"):
            event["name"] = name + payload if suffix else payload + name
    target.write_bytes(gzip.compress(json.dumps(data).encode()))
    return target


def hostile_ncu(source: Path, target: Path, payload: str) -> Path:
    """A copy of an ncu details CSV whose kernel names start with `payload`."""
    rows = list(csv.reader(source.open(newline="")))
    column = rows[0].index("Kernel Name")
    with target.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            [rows[0]] + [r[:column] + [payload + r[column]] + r[column + 1:] if len(r) > column else r
                         for r in rows[1:]])
    return target


_BLANKS: dict[int, bytes] = {}
_BLANKS_LOCK = threading.Lock()


def gzip_bomb(source: Path, target: Path, where: str, mbytes: int = 1024) -> Path:
    """A valid trace (.json.gz) padded with `mbytes` MB of blanks (about 1 MB compressed) at
    `where`: inside the events array, before it, or after it. Three gzip members (as gzip -c a b c
    writes them): the text up to there, the blanks (compressed once), the rest."""
    text = gzip.decompress(source.read_bytes())
    cut = {"inside": text.index(b"},", text.index(b"\"traceEvents\"")) + 2, "before": text.index(b"{") + 1,
           "after": text.rindex(b"}")}[where]
    with _BLANKS_LOCK:
        if mbytes not in _BLANKS:
            packer = zlib.compressobj(9, zlib.DEFLATED, 31)
            block = b" " * (1 << 20)
            _BLANKS[mbytes] = b"".join(packer.compress(block) for _ in range(mbytes)) + packer.flush()
    target.write_bytes(gzip.compress(text[:cut]) + _BLANKS[mbytes] + gzip.compress(text[cut:]))
    return target


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root` (links not followed): its kind and content digest, and the mode of directories."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        key = str(path.relative_to(root))
        if stat.S_ISLNK(info.st_mode):
            out[key] = "link " + os.readlink(path)
        elif stat.S_ISDIR(info.st_mode):
            out[key] = f"dir {info.st_mode:o}"
        elif stat.S_ISREG(info.st_mode):
            out[key] = digest(path)
        else:
            out[key] = f"special {info.st_mode:o}"
    out["."] = f"dir {root.stat().st_mode:o}"
    return out


# ---- running commands: on a pseudo-terminal, watched for hangs and memory --------------------------

def tty_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str]:
    """Run `hpcprof ARGS` on a pseudo-terminal (stdout and stderr), as a person would: (exit status, output)."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof", *args], cwd=cwd, stdin=slave, stdout=slave,
                            stderr=slave, start_new_session=True,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", **(env or {})})
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                continue
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                break
    finally:
        os.close(master)
    return proc.wait(), out.decode(errors="replace")


def terminal_class(code: int, output: str, expect: int | tuple[int, ...] = 0) -> str:
    """HANDLED when the output holds no traceback and none of TERMINAL_BAD, with an expected exit status."""
    if "Traceback" in output:
        return TRACEBACK
    if bad := [seq for seq in TERMINAL_BAD if seq in output]:
        return f"{OTHER} ({' '.join(repr(s) for s in bad)} reached the terminal)"
    return HANDLED if code in ((expect,) if isinstance(expect, int) else expect) else f"{OTHER} (exit {code})"


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def watched(*args: str, cwd: Path, timeout: float = HANG_S, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str] | str:
    """Run `hpcprof ARGS`; its result, or the outcome (BLOCKED) when it hung past `timeout` s or grew past
    MEMORY_MB (then killed with its process group)."""
    proc = subprocess.Popen([sys.executable, "-m", "hpcprof", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env={**os.environ, **(env or {})})
    streams: list[str] = ["", ""]

    def drain() -> None:
        streams[0], streams[1] = proc.communicate()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    start = time.monotonic()
    peak = 0.0
    verdict = ""
    while reader.is_alive():
        peak = max(peak, _rss_mb(proc.pid))
        if peak > MEMORY_MB:
            verdict = f"{BLOCKED} (read without bound: {peak:.0f} MB resident, killed)"
        elif time.monotonic() - start > timeout:
            verdict = f"{BLOCKED} (hung {timeout:.0f} s, killed)"
        if verdict:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reader.join(30)
            return verdict
        reader.join(0.05)
    return subprocess.CompletedProcess(proc.args, proc.returncode, streams[0], streams[1])


def settled(result: subprocess.CompletedProcess[str] | str, codes: tuple[int, ...], named: str = "") -> str:
    """HANDLED for a command that ended with one of `codes`, without a traceback, naming `named` (a
    file the user must look at) on stdout or stderr."""
    if isinstance(result, str):
        return result
    if "Traceback" in result.stderr:
        return TRACEBACK
    if result.returncode not in codes:
        return f"{OTHER} (exit {result.returncode}: {result.stderr.strip()[-160:]})"
    if named and named not in result.stderr + result.stdout:
        return f"{OTHER} ({named} not named)"
    return HANDLED


# ---- the runs the cases start from -------------------------------------------------------------------

class Hostile(Fixtures):
    """Fixtures (reliability_faults) plus collected runs whose profile text is hostile."""

    def __init__(self, tmp: Path, fixtures: Path) -> None:
        super().__init__(tmp, fixtures)
        self.keyed: dict[str, Path] = {}
        self.keyed_lock = threading.RLock()   # a fixture made of another (Fixtures.lock is not reentrant)

    def once(self, key: str, make: Callable[[], Path]) -> Path:
        with self.keyed_lock:
            if key not in self.keyed:
                self.keyed[key] = make()
            return self.keyed[key]

    def nsys_export(self, rank: int = 0) -> Path:
        return self.fixtures / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite"

    def trace(self, rank: int = 0) -> Path:
        return self.fixtures / "hta" / "trace_filter" / f"sampled_rank-{rank}.json.gz"

    def ncu_details(self) -> Path:
        return self.fixtures / "ncu" / "gold_ncu_2022.3" / "indexspaces_74de19f_details.csv"

    def echo_exports(self) -> Path:
        found = self.fixtures / "echo" / "quirks"
        return found if (found / "ws1.sqlite").is_file() else REPO / "tests" / "fixtures" / "echo" / "quirks"

    def collected_nsys(self, payload: str) -> Path:
        """A workdir with one nsys run (2 ranks) whose kernel and NVTX names start with `payload`, collected."""
        def make() -> Path:
            work, [run] = self.copy(self.nsys)
            for rank in (0, 1):
                hostile_export(self.nsys_export(rank), run / "profiles" / "nsys" / f"rank{rank}.sqlite", payload)
            result = cli("collect", cwd=work)
            assert result.returncode == 0, result.stderr
            return work
        return self.once(f"nsys {payload}", make)

    def collected_sweep(self, values: tuple[str, ...]) -> Path:
        """A workdir with a sweep of env.A over `values`, collected."""
        def make() -> Path:
            work = self.fresh()
            exp = write_exp(work / "e.yaml", ["true"], "sweep:\n  env.A: " + json.dumps(list(values)) + "\n")
            result = cli("submit", str(exp), "--wait", cwd=work)
            assert result.returncode == 0, result.stderr
            assert cli("collect", cwd=work).returncode == 0
            return work
        return self.once(f"sweep {values!r}", make)

    def seqpar_sweep(self, values: tuple[str, ...]) -> Path:
        """A workdir with a sweep of a small CPU seqpar run over env.A in `values` (figures per point), collected."""
        def make() -> Path:
            work = self.fresh()
            (work / "e.yaml").write_text(
                "name: s\nworkload:\n  kind: seqpar\n  args: {sequence_length: 64, hidden_dim: 32, iterations: 3, "
                "warmup_iterations: 1}\nresources: {nodes: 1, ranks_per_node: 1}\nsweep:\n  env.A: "
                + json.dumps(list(values)) + "\n")
            result = cli("submit", "e.yaml", "--wait", cwd=work)
            assert result.returncode == 0, result.stderr
            assert cli("collect", cwd=work).returncode == 0
            return work
        return self.once(f"seqpar {values!r}", make)

    def failed_with_log(self, payload: str) -> Path:
        """A workdir with one run that printed `payload` and failed."""
        def make() -> Path:
            work = self.fresh()
            exp = write_exp(work / "e.yaml", ["python3", "-c", f"import sys; print({payload!r}); sys.exit(3)"])
            cli("submit", str(exp), "--wait", cwd=work)
            return work
        return self.once(f"failed {payload}", make)

    def torch_run(self) -> tuple[Path, Path]:
        """A fresh copy of a finished run turned into a torch run (its profiles/torch/ empty)."""
        work, runs = self.copy(self.sweep)
        run = runs[0]
        config = json.loads((run / "config.json").read_text())
        config["experiment"]["profile"]["tool"] = "torch"
        (run / "config.json").write_text(json.dumps(config))
        (run / "profiles" / "torch").mkdir(parents=True)
        return work, run

    def many_ranks(self) -> Path:
        """A workdir with one nsys run of 8 ranks (its world, 8 rank exports), not collected."""
        def make() -> Path:
            work, [run] = self.copy(self.nsys)
            for rank in range(2, 8):
                shutil.copyfile(self.nsys_export(rank % 2), run / "profiles" / "nsys" / f"rank{rank}.sqlite")
            config = json.loads((run / "config.json").read_text())   # a world of 8: no rank outside it
            config["world_size"] = config["ranks_per_node"] = config["experiment"]["resources"]["ranks_per_node"] = 8
            (run / "config.json").write_text(json.dumps(config))
            return work
        return self.once("many", make)


def tables(run: Path) -> dict[str, object]:
    """The run's result tables (pyarrow), by file name."""
    import pyarrow.parquet as pq

    return {p.name: pq.read_table(p) for p in sorted((run / "results").glob("*.parquet"))}


# ---- class 1: nothing written or deleted through a link out of the run directory ---------------------

def outside_cases(hx: Hostile) -> list[Case]:
    def linked(sub: str, to_other_run: bool = False, workers: int = 1) -> Callable[[], str]:
        def run() -> str:
            if to_other_run:
                work, [first, second] = hx.copy(hx.sweep)
                for rank, point in enumerate((first, second)):   # other profiles: other tables
                    config = json.loads((point / "config.json").read_text())
                    config["experiment"]["profile"]["tool"] = "nsys"
                    (point / "config.json").write_text(json.dumps(config))
                    (point / "profiles" / "nsys").mkdir(parents=True)
                    shutil.copyfile(hx.nsys_export(rank), point / "profiles" / "nsys" / "rank0.sqlite")
                assert cli("collect", second.name, cwd=work).returncode == 0
                run_dir, outside = first, second / "results"
                shutil.rmtree(run_dir / "results")
            else:
                work, [run_dir] = hx.copy(hx.nsys)
                if sub != "results":
                    assert cli("collect", cwd=work).returncode == 0  # derived/ made, the next collect reuses it
                outside = hx.fresh() / "mine"
                outside.mkdir()
                (outside / "notes.txt").write_text("keep me")
                (outside / "nsys_cuda_gpu_kern_sum.parquet").write_text("my own file")
                (outside / "mine.arrow").write_text("my own bundle")
                parts = outside / "nsys" / "parts" if sub == "derived" else \
                    outside / "parts" if sub == "derived/nsys" else outside
                (parts / "old" / "results").mkdir(parents=True)
                (parts / "old" / "results" / "keep.parquet").write_text("my own table")
                (parts / "mine.arrow").write_text("my own bundle")
                (parts / ".x.host-999999.0123456789abcdef.tmp").write_text("named like a temporary")
                os.utime(parts / "mine.arrow", (1, 1))
                shutil.rmtree(run_dir / sub)
            (run_dir / sub).symlink_to(outside, target_is_directory=True)
            before = snapshot(outside)
            result = watched("collect", run_dir.name, "--workers", str(workers), cwd=work, timeout=300)
            if isinstance(result, str):
                return result
            if snapshot(outside) != before:
                changed = sorted(set(snapshot(outside).items()) ^ set(before.items()))[:2]
                return f"{LOST} ({', '.join(name for name, _ in changed)} changed through {sub}/)"
            return settled(result, (2, 3), named=sub)
        return run

    def template_cache() -> str:
        work = hx.fresh()
        outside = work / "mine"
        outside.mkdir(mode=0o755)
        outside.chmod(0o755)
        (outside / "notes.txt").write_text("keep me")
        (work / "cache" / "hpcprof").mkdir(parents=True)
        (work / "cache" / "hpcprof" / "templates").symlink_to(outside, target_is_directory=True)
        before = snapshot(outside)
        result = cli("render", str(write_exp(work / "e.yaml", ["true"])), cwd=work, env={"XDG_CACHE_HOME": str(work / "cache")})
        if snapshot(outside) != before:
            return f"{LOST} (the linked directory changed: mode or files)"
        return exit_class(result, 0)

    def linked_inside() -> str:   # a link that stays in the run directory is no reason to refuse
        work, [run_dir] = hx.copy(hx.nsys)
        shutil.rmtree(run_dir / "results")
        (run_dir / "results.real").mkdir()
        (run_dir / "results").symlink_to("results.real", target_is_directory=True)
        result = cli("collect", run_dir.name, cwd=work)
        if result.returncode != 0:
            return exit_class(result, 0)
        return HANDLED if (run_dir / "results.real" / "nsys_cuda_gpu_kern_sum.parquet").is_file() else OTHER

    return [("class 1: results/ a link inside the run directory: collected as before", linked_inside),
            ("class 1: results/ a link to my directory: collect", linked("results")),
            ("class 1: results/ a link, collect --workers 2", linked("results", workers=2)),
            ("class 1: results/ a link to another run's results: collect", linked("results", to_other_run=True)),
            ("class 1: derived/ a link to my directory: collect again", linked("derived")),
            ("class 1: derived/nsys a link to my directory: collect again", linked("derived/nsys")),
            ("class 1: derived/nsys/parts a link: collect again", linked("derived/nsys/parts")),
            ("class 1: the template cache a link to my directory: render", template_cache)]


# ---- class 2: outputs never replace the workdir's own files, inputs, special files, links ---------------

def output_cases(hx: Hostile) -> list[Case]:
    def own_file(command: str, which: str) -> Callable[[], str]:
        def run() -> str:
            base = hx.collected_nsys("")
            work = hx.fresh() / "w"
            shutil.copytree(base, work, symlinks=True)
            [run_dir] = run_dirs(work / "hpcprof-runs")
            target = {"the store": work / "hpcprof-runs" / "hpcprof.db",
                      "the store's -wal": work / "hpcprof-runs" / "hpcprof.db-wal",
                      "config.json": run_dir / "config.json",
                      "a rank export": run_dir / "profiles" / "nsys" / "rank0.sqlite",
                      "headline.json": run_dir / "results" / "headline.json",
                      "a result table": run_dir / "results" / "nsys_cuda_gpu_kern_sum.parquet",
                      "the job log": run_dir / "logs" / "job.out"}[which]
            existed = target.exists()
            before = digest(target) if existed else None
            args = {"report --html": ["report", "--html", str(target)],
                    "compare -o": ["compare", "-o", str(target)]}[command]
            result = cli(*args, cwd=work)
            if (digest(target) if target.exists() else None) != before:
                return f"{LOST} ({which} {'replaced' if existed else 'created'})"
            return one_line(result)
        return run

    def own_input(args: Callable[[Path], list[str]], name: str, make: Callable[[Path], None]) -> Callable[[], str]:
        def run() -> str:
            work = hx.fresh()
            make(work / name)
            before = digest(work / name)
            result = cli(*args(work / name), cwd=work)
            return LOST if digest(work / name) != before else one_line(result)
        return run

    def special(kind: str, command: str) -> Callable[[], str]:
        def run() -> str:
            base = hx.collected_nsys("")
            work = hx.fresh() / "w"
            shutil.copytree(base, work, symlinks=True)
            shutil.copyfile(hx.trace(0), work / "rank0.json.gz")
            shutil.copyfile(hx.nsys_export(0), work / "x.sqlite")
            target = work / "out"
            mine = work / "mine.txt"
            if kind == "a FIFO":
                os.mkfifo(target)
            elif kind == "a character device":
                os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))   # as /dev/null
            elif kind == "a link to my file":
                mine.write_text("keep me")
                target.symlink_to(mine)
            else:  # a directory
                target.mkdir()
                (target / "notes.txt").write_text("keep me")
            before = (target.lstat().st_mode, os.readlink(target) if target.is_symlink() else None,
                      mine.read_text() if mine.exists() else None)
            args = {"report --html": ["report", "--html", str(target)],
                    "compare -o": ["compare", "-o", str(target)],
                    "trace critical-path -o": ["trace", "critical-path", "rank0.json.gz", "--format", "csv",
                                               "-o", str(target)],
                    "nsys gaps -o": ["nsys", "gaps", "x.sqlite", "-o", str(target)]}[command]
            result = watched(*args, cwd=work, timeout=60)
            if isinstance(result, str):
                return result
            after = (target.lstat().st_mode, os.readlink(target) if target.is_symlink() else None,
                     mine.read_text() if mine.exists() else None)
            if after != before:
                return f"{LOST} ({kind} replaced)"
            return one_line(result)
        return run

    cases: list[Case] = []
    for command in ("report --html", "compare -o"):
        for which in ("the store", "the store's -wal", "config.json", "a rank export", "headline.json",
                      "a result table", "the job log"):
            cases.append((f"class 2: {command} at {which}", own_file(command, which)))

    def trace_copy(path: Path) -> None:
        shutil.copyfile(hx.trace(0), path)

    def ncu_copy(path: Path) -> None:
        shutil.copyfile(hx.ncu_details(), path)

    cases += [
        ("class 2: trace critical-path X -o X", own_input(
            lambda p: ["trace", "critical-path", str(p), "--format", "json", "-o", str(p)], "rank0.json.gz", trace_copy)),
        ("class 2: trace critical-path X -o ./X", own_input(
            lambda p: ["trace", "critical-path", p.name, "--format", "csv", "-o", f"./{p.name}"], "rank0.json.gz",
            trace_copy)),
        ("class 2: trace all -o DIR over its input", own_input(
            lambda p: ["trace", "all", str(p), "--format", "csv", "-o", str(p.parent)], "temporal.csv",
            lambda p: shutil.copyfile(hx.trace(0), p))),
        ("class 2: ncu metrics X -o X", own_input(
            lambda p: ["ncu", "metrics", str(p), "--format", "csv", "-o", str(p)], "rank0_details.csv", ncu_copy)),
    ]
    for kind in ("a FIFO", "a link to my file", "a directory") + (("a character device",) if os.geteuid() == 0 else ()):
        for command in ("report --html", "compare -o", "trace critical-path -o", "nsys gaps -o"):
            cases.append((f"class 2: {command} at {kind}", special(kind, command)))
    return cases


# ---- class 3: no spreadsheet formula from profile text ------------------------------------------------

def formula_cells(text: str) -> list[str]:
    """The CSV cells of `text` that a spreadsheet would run (starting with = + - @ tab CR)."""
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row
            if cell.startswith(FORMULA_START) and not _number(cell)]


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def formula_cases(hx: Hostile) -> list[Case]:
    sweep = (FORMULA, "+1+cmd|' /C calc'!A0", "-1+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
             "\t=1+1", "\r=1+1")

    def csv_case(make: Callable[[], tuple[Path, list[str]]]) -> Callable[[], str]:
        def run() -> str:
            cwd, args = make()
            result = cli(*args, cwd=cwd)
            if result.returncode not in (0, 3):
                return exit_class(result, 0)
            cells = formula_cells(result.stdout)
            return f"{ACCEPTED} (formula cells: {cells[0][:40]!r} ...)" if cells else HANDLED
        return run

    def compare_sweep() -> tuple[Path, list[str]]:
        return hx.collected_sweep(sweep), ["compare", "--format", "csv"]

    def compare_kernel() -> tuple[Path, list[str]]:
        return hx.collected_nsys(FORMULA), ["compare", "--format", "csv"]

    def nsys_stats() -> tuple[Path, list[str]]:
        work = hx.fresh()
        hostile_export(hx.nsys_export(0), work / "rank0.sqlite", FORMULA)
        return work, ["nsys", "stats", "-r", "cuda_gpu_kern_sum,nvtx_sum", "--format", "csv", "rank0.sqlite"]

    def nsys_phases() -> tuple[Path, list[str]]:
        work = hx.fresh()
        hostile_export(hx.nsys_export(0), work / "rank0.sqlite", FORMULA)
        return work, ["nsys", "phases", "--format", "csv", "rank0.sqlite"]

    def trace_kernels() -> tuple[Path, list[str]]:
        work = hx.fresh()
        hostile_trace(hx.trace(0), work / "rank0.json.gz", FORMULA)
        return work, ["trace", "kernels", "--format", "csv", "rank0.json.gz"]

    def ncu_metrics() -> tuple[Path, list[str]]:
        work = hx.fresh()
        hostile_ncu(hx.ncu_details(), work / "rank0_details.csv", FORMULA)
        return work, ["ncu", "metrics", "--format", "csv", "rank0_details.csv"]

    def echo(layout: list[str], suffix: str, payload: str = FORMULA) -> Callable[[], str]:
        def run() -> str:
            work = hx.fresh()
            quirks = hx.echo_exports()
            hostile_export(quirks / "ws1.sqlite", work / "ws1.sqlite", payload)
            hostile_export(quirks / "ws2.sqlite", work / "ws2_rank0.sqlite", payload)
            result = cli("nsys", "slowdown", "--baseline", "ws1.sqlite", "--distributed", "ws2_rank0.sqlite",
                         *layout, "-o", f"out{suffix}", cwd=work)
            written = sorted(work.glob(f"out*{suffix}"))
            if result.returncode != 0 or not written:
                return exit_class(result, 0)
            if suffix == ".csv":
                cells = [c for p in written for c in formula_cells(p.read_text())]
            else:
                from openpyxl import load_workbook

                cells = [str(cell.value) for p in written for row in load_workbook(p).active.iter_rows()
                         for cell in row if cell.data_type == "f"]   # a text cell shows its text
            return f"{ACCEPTED} ({len(cells)} formula cell(s) in {written[0].name})" if cells else HANDLED
        return run

    return [("class 3: compare --format csv, swept values", csv_case(compare_sweep)),
            ("class 3: compare --format csv, the top kernel", csv_case(compare_kernel)),
            ("class 3: nsys stats --format csv, kernel and NVTX names", csv_case(nsys_stats)),
            ("class 3: nsys phases --format csv, NVTX names", csv_case(nsys_phases)),
            ("class 3: trace kernels --format csv", csv_case(trace_kernels)),
            ("class 3: ncu metrics --format csv", csv_case(ncu_metrics)),
            ("class 3: Echo's slowdown .xlsx (--layout echo)", echo(["--layout", "echo"], ".xlsx")),
            ("class 3: Echo's slowdown .xlsx (--match echo)", echo(["--match", "echo"], ".xlsx")),
            ("class 3: Echo's slowdown .csv (--layout echo)", echo(["--layout", "echo"], ".csv")),
            ("class 3: Echo's slowdown .xlsx, control characters and a formula in names",
             echo(["--layout", "echo"], ".xlsx", FORMULA + ESCAPES))]


# ---- class 4: no hang, no unbounded read, no orphan ------------------------------------------------------

def hang_cases(hx: Hostile) -> list[Case]:
    def run_file(file: str, kind: str, command: str) -> Callable[[], str]:
        def run() -> str:
            if file == "logs/job.out":
                base = hx.failed_with_log("a failed job")
                work = hx.fresh() / "w"
                shutil.copytree(base, work, symlinks=True)
                runs = run_dirs(work / "hpcprof-runs")
            else:
                work, runs = hx.copy(hx.sweep)
                if command in ("report", "compare"):
                    assert cli("collect", cwd=work).returncode == 0
            if file == "status":
                (runs[0] / "state.stored").unlink(missing_ok=True)   # the state is read from the status file
            target = runs[0] / file
            target.unlink(missing_ok=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            if kind == "a FIFO":
                os.mkfifo(target)
            else:
                target.symlink_to("/dev/zero")
            args = {"collect": ["collect", runs[0].name], "status": ["status", "--format", "json"], "report": ["report"],
                    "compare": ["compare"], "logs": ["logs", runs[0].name]}[command]
            result = watched(*args, cwd=work)
            if isinstance(result, str):
                return result
            if len(runs) > 1 and command in ("status", "report", "compare") and runs[1].name not in result.stdout:
                return f"{BLOCKED} (the other run not shown)"
            # a file that decides what is shown is named; a note made again (state.stored, collect.stored,
            # headline.json), a job id, a log line looked for, or a state collect records is not worth a word
            named = file in ("config.json", "results/extra.json") or (file, command) in (
                ("status", "status"), ("status", "report"), ("logs/job.out", "report"), ("logs/job.out", "logs"))
            return settled(result, (0, 2, 3), named=target.name if named else "")
        return run

    def profile_file(kind: str, tool: str) -> Callable[[], str]:
        def run() -> str:
            if tool == "nsys":
                work, [run_dir] = hx.copy(hx.nsys)
                target = run_dir / "profiles" / "nsys" / "rank1.sqlite"
                target.unlink()
            else:
                work, run_dir = hx.torch_run()
                shutil.copyfile(hx.trace(0), run_dir / "profiles" / "torch" / "rank0.pt.trace.json.gz")
                target = run_dir / "profiles" / "torch" / "rank1.pt.trace.json.gz"
            if kind == "a FIFO":
                os.mkfifo(target)
            elif kind == "/dev/zero":
                target.symlink_to("/dev/zero")
            else:
                gzip_bomb(hx.trace(1), target, "inside")
            result = watched("collect", run_dir.name, cwd=work, timeout=120)
            return settled(result, (3,), named=target.name)
        return run

    def cli_input(kind: str, command: list[str], name: str) -> Callable[[], str]:
        def run() -> str:
            work = hx.fresh()
            target = work / name
            if kind == "/dev/zero":
                target.symlink_to("/dev/zero")
            elif kind == "a FIFO":
                os.mkfifo(target)
            else:
                gzip_bomb(hx.trace(0), target, kind.split()[-1])
            return settled(watched(*command, name, cwd=work, timeout=120), (2,), named=name)
        return run

    def killed(sig: signal.Signals) -> str:
        reference = hx.once("many collected", lambda: _collected_copy(hx))
        work = hx.fresh() / "w"
        shutil.copytree(hx.many_ranks(), work, symlinks=True)
        [run_dir] = run_dirs(work / "hpcprof-runs")
        proc = subprocess.Popen([sys.executable, "-m", "hpcprof", "collect", "--workers", "2"], cwd=work,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        workers: list[int] = []
        deadline = time.monotonic() + 60
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
            workers = descendants(proc.pid)
        if len(workers) < 2:
            proc.kill()
            proc.wait()
            return f"{OTHER} (harness: collect started no 2 workers)"
        time.sleep(0.3)
        proc.send_signal(sig)
        proc.wait(timeout=60)   # (its output is not read: orphaned workers would hold the pipe open)
        time.sleep(3)
        left = [pid for pid in workers if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if left:
            return f"{LEFT} ({len(left)} worker process(es) still running 3 s after the {sig.name})"
        again = cli("collect", cwd=work)
        if again.returncode != 0:
            return f"{OTHER} (collect after the {sig.name}: exit {again.returncode})"
        got, want = tables(run_dir), tables(reference)
        if set(got) != set(want):
            return f"{LOST} (tables after the {sig.name}: {sorted(set(got) ^ set(want))[:3]})"
        differ = [name for name in want if not got[name].equals(want[name])]  # type: ignore[attr-defined]
        if differ:
            return f"{LOST} ({differ[0]} differs after the {sig.name})"
        return HANDLED

    cases: list[Case] = []
    for kind in ("a FIFO", "/dev/zero"):
        for file, commands in (("status", ("status", "report", "collect")),
                               ("config.json", ("status", "report", "compare", "collect")),
                               ("results/extra.json", ("collect",)),
                               ("logs/job.out", ("status", "report", "logs")),
                               ("submission.json", ("status",)),
                               ("state.stored", ("status",)),
                               ("collect.stored", ("status",)),
                               ("results/headline.json", ("report", "compare"))):
            for command in commands:
                cases.append((f"class 4: {kind} as {file}: {command}", run_file(file, kind, command)))
    for kind in ("a FIFO", "/dev/zero", "a gzip bomb"):
        for tool in ("nsys", "torch"):
            if kind == "a gzip bomb" and tool == "nsys":
                continue
            cases.append((f"class 4: {kind} as a {tool} rank file: collect", profile_file(kind, tool)))
    for kind, command, name in (("/dev/zero", ["trace", "kernels"], "rank0.json"),
                                ("/dev/zero", ["ncu", "metrics"], "rank0_details.csv"),
                                ("/dev/zero", ["nsys", "stats", "-r", "cuda_gpu_kern_sum"], "rank0.sqlite"),
                                ("a FIFO", ["trace", "kernels"], "rank0.json"),
                                ("a FIFO", ["ncu", "metrics"], "rank0_details.csv"),
                                ("a gzip bomb inside", ["trace", "kernels"], "rank0.json.gz"),
                                ("a gzip bomb before", ["trace", "kernels"], "rank0.json.gz"),
                                ("a gzip bomb after", ["trace", "temporal"], "rank0.json.gz"),
                                ("a gzip bomb inside", ["trace", "critical-path"], "rank0.json.gz")):
        cases.append((f"class 4: {kind} as {' '.join(command)}'s input", cli_input(kind, command, name)))
    cases += [("class 4: SIGKILL collect --workers 2: no worker left, collect again the same",
               lambda: killed(signal.SIGKILL)),
              ("class 4: SIGTERM collect --workers 2: no worker left, collect again the same",
               lambda: killed(signal.SIGTERM))]
    return cases


def _collected_copy(hx: Hostile) -> Path:
    work = hx.fresh() / "w"
    shutil.copytree(hx.many_ranks(), work, symlinks=True)
    assert cli("collect", "--workers", "2", cwd=work).returncode == 0
    [run_dir] = run_dirs(work / "hpcprof-runs")
    return run_dir


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, their children, ...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        kids = [child for child, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


# ---- class 6 (rich markup) and 7 (text reaching a person) -------------------------------------------------

def text_cases(hx: Hostile) -> list[Case]:
    def on_terminal(payload: str, make: Callable[[str], tuple[Path, list[str], int | tuple[int, ...]]],
                    env: Callable[[Path], dict[str, str]] | None = None) -> Callable[[], str]:
        def run() -> str:
            cwd, args, expect = make(payload)
            code, output = tty_cli(*args, cwd=cwd, env=env(cwd) if env else None)
            return terminal_class(code, output, expect)
        return run

    def export(command: list[str]) -> Callable[[str], tuple[Path, list[str], int]]:
        def make(payload: str) -> tuple[Path, list[str], int]:
            work = hx.fresh()
            hostile_export(hx.nsys_export(0), work / "rank0.sqlite", payload, suffix=True)
            return work, [*command, "rank0.sqlite"], 0
        return make

    def trace(command: list[str]) -> Callable[[str], tuple[Path, list[str], int]]:
        def make(payload: str) -> tuple[Path, list[str], int]:
            work = hx.fresh()
            for rank in (0, 1):
                hostile_trace(hx.trace(rank), work / f"rank{rank}.json.gz", payload, suffix=True)
            return work, [*command, "rank0.json.gz", "rank1.json.gz"], 0
        return make

    def ncu(payload: str) -> tuple[Path, list[str], int]:
        work = hx.fresh()
        hostile_ncu(hx.ncu_details(), work / "rank0_details.csv", payload)
        return work, ["ncu", "metrics", "rank0_details.csv"], 0

    def collected(command: list[str]) -> Callable[[str], tuple[Path, list[str], int]]:
        def make(payload: str) -> tuple[Path, list[str], int]:
            return hx.collected_nsys(payload), command, 0
        return make

    def swept(command: list[str]) -> Callable[[str], tuple[Path, list[str], int]]:
        def make(payload: str) -> tuple[Path, list[str], int]:
            return hx.collected_sweep((payload, "plain")), command, 0
        return make

    def failed(command: list[str]) -> Callable[[str], tuple[Path, list[str], int]]:
        def make(payload: str) -> tuple[Path, list[str], int]:
            work = hx.failed_with_log(payload)
            args = [a.replace("RUN", run_dirs(work / "hpcprof-runs")[0].name) for a in command]
            return work, args, 0
        return make

    def damaged_rank_file(payload: str) -> tuple[Path, list[str], int]:
        work, [run_dir] = hx.copy(hx.nsys)
        (run_dir / "profiles" / "nsys" / f"rank1{payload.replace('/', '')}.sqlite").write_bytes(b"not an export")
        return work, ["collect"], 3

    def missing_file(payload: str) -> tuple[Path, list[str], int]:
        return hx.fresh(), ["nsys", "stats", "-r", "cuda_gpu_kern_sum", f"rank0{payload.replace('/', '')}.sqlite"], 2

    def recorded_workdir(payload: str) -> tuple[Path, list[str], int]:
        work = hx.fresh()
        elsewhere = work / f"runs{payload}"
        shutil.copytree(hx.sweep / "hpcprof-runs", elsewhere, symlinks=True)
        state = work / "state" / "hpcprof"
        state.mkdir(parents=True)
        (state / "workdirs").write_text(f"local\t{elsewhere}\n")
        return work, ["status"], 2

    def state_env(cwd: Path) -> dict[str, str]:
        return {"XDG_STATE_HOME": str(cwd / "state")}

    makers: list[tuple[str, Callable[[str], tuple[Path, list[str], int | tuple[int, ...]]], bool]] = [
        ("nsys stats (kernel names)", export(["nsys", "stats", "-r", "cuda_gpu_kern_sum"]), True),
        ("nsys stats nvtx_sum (NVTX ranges)", export(["nsys", "stats", "-r", "nvtx_sum"]), True),
        ("nsys phases (NVTX ranges)", export(["nsys", "phases"]), True),
        ("trace kernels", trace(["trace", "kernels"]), True),
        ("trace critical-path", trace(["trace", "critical-path"]), True),
        ("ncu metrics", ncu, True),
        ("report (the top kernels)", collected(["report"]), True),
        ("report --full (result tables)", collected(["report", "--full"]), True),
        ("compare (the top kernel)", collected(["compare"]), True),
        ("report (a swept value)", swept(["report"]), True),
        ("compare (a swept value)", swept(["compare"]), True),
        ("status (a swept value's run)", swept(["status"]), False),
        ("report (a failed run's log and reason)", failed(["report"]), True),
        ("logs (a job log)", failed(["logs", "RUN"]), False),
        ("collect (a damaged rank file's name)", damaged_rank_file, False),
        ("nsys stats (a missing file's name)", missing_file, False),
    ]
    cases: list[Case] = []
    for what, make, markup in makers:
        if markup:
            cases.append((f"class 6: rich markup in {what}", on_terminal(MARKUP, make)))
        cases.append((f"class 7: terminal escapes and [link] in {what}", on_terminal(ESCAPES + LINK, make)))
    cases.append(("class 7: terminal escapes in a recorded workdir (status lists it)",
                  on_terminal(ESCAPES, recorded_workdir, state_env)))

    def html_links(make: Callable[[], Path]) -> Callable[[], str]:
        def run() -> str:
            work = make()
            result = cli("report", "--html", "r.html", cwd=work)
            if result.returncode != 0:
                return exit_class(result, 0)
            text = (work / "r.html").read_text()
            if "evil.example\\u002fh" not in text:   # plotly's JSON writes / as \u002f: the name is in a figure
                return f"{OTHER} (harness: the hostile name is in no figure of the report)"
            decoded = text.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u002f", "/").replace('\\"', '"')
            return f"{OTHER} (a live <a href> link in a figure)" if '<a href="https://evil.example/h' in decoded \
                else HANDLED
        return run

    cases += [("class 7: <a href> in kernel names: report --html", html_links(lambda: hx.collected_nsys(HTML))),
              ("class 7: <a href> in a swept value: report --html", html_links(lambda: hx.seqpar_sweep((HTML, "plain"))))]
    return cases


def hostile_cases(tmp: Path, fixtures: Path) -> list[Case]:
    hx = Hostile(tmp, fixtures)
    return [*outside_cases(hx), *output_cases(hx), *formula_cases(hx), *hang_cases(hx), *text_cases(hx)]

