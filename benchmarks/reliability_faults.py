"""The `faults` group of benchmarks/reliability.py: files touched by a refused command,
results silently incomplete, one damaged file hiding the others, tracebacks and leftovers.

Every case runs the real CLI on real local runs, real nsys exports and, for a full disk, a real
tmpfs mounted in a private mount namespace (`unshare -rm`, or as root a private mount) and
filled so that writes fail with ENOSPC.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
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

Case = tuple[str, Callable[[], str]]
SWEEP = "sweep:\n  env.A: [x, y]\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def worst(*outcomes: str) -> str:
    """The first outcome that is not HANDLED (HANDLED when all are)."""
    return next((o for o in outcomes if o != HANDLED), HANDLED)


def exit_class(result: subprocess.CompletedProcess[str], code: int) -> str:
    """HANDLED for exit status `code` without a traceback."""
    if "Traceback" in result.stderr:
        return TRACEBACK
    if result.returncode == 0 and code != 0:
        return ACCEPTED
    return HANDLED if result.returncode == code else OTHER


def made_once(make: Callable[[Fixtures], Path]) -> property:
    """A Fixtures property made by the first case that needs it (cases may run in threads)."""
    def locked(self: Fixtures) -> Path:
        with self.lock:
            if make.__name__ not in self.made:
                self.made[make.__name__] = make(self)
            return self.made[make.__name__]
    return property(locked)


class Fixtures:
    """Run directories made once (real local runs), copied for every case that damages one."""

    def __init__(self, tmp: Path, fixtures: Path) -> None:
        self.tmp, self.fixtures = tmp, fixtures
        self.lock = threading.Lock()
        self.made: dict[str, Path] = {}

    def fresh(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.tmp))

    @made_once
    def sweep(self) -> Path:
        """A work directory holding one finished 2-point sweep (runs `hpcprof-runs/t/*`)."""
        work = self.tmp / "sweep-base"
        work.mkdir()
        result = cli("submit", str(write_exp(work / "e.yaml", ["true"], SWEEP)), "--wait", cwd=work)
        assert result.returncode == 0, result.stderr
        return work

    @made_once
    def nsys(self) -> Path:
        """A work directory holding one finished run turned into an nsys run with two rank exports."""
        work = self.tmp / "nsys-base"
        work.mkdir()
        result = cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--wait", cwd=work)
        assert result.returncode == 0, result.stderr
        [run] = run_dirs(work / "hpcprof-runs")
        config = json.loads((run / "config.json").read_text())
        config["experiment"]["profile"]["tool"] = "nsys"
        config["world_size"] = 2                    # the two ranks whose exports are copied in
        (run / "config.json").write_text(json.dumps(config))
        (run / "profiles" / "nsys").mkdir(parents=True)
        for rank in (0, 1):
            shutil.copyfile(self.fixtures / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite",
                            run / "profiles" / "nsys" / f"rank{rank}.sqlite")
        return work

    def copy(self, base: Path) -> tuple[Path, list[Path]]:
        work = self.fresh() / "w"
        shutil.copytree(base, work, symlinks=True)
        return work, run_dirs(work / "hpcprof-runs")


# ---- data touched: nothing of the user's is opened for writing or replaced ----------------------

def touched_cases(fx: Fixtures) -> list[Case]:
    def foreign_db(command: str, kind: str) -> Callable[[], str]:
        def run() -> str:
            work, _ = fx.copy(fx.sweep)
            target = work / "foreign.sqlite"
            if kind == "nsys export":
                shutil.copyfile(fx.fixtures / "nsys" / "nsysai_mock.sqlite", target)
            else:
                target.write_bytes(os.urandom(8192))
            before = digest(target)
            args = {"status": ["status", "--workdir", "hpcprof-runs"],
                    "collect": ["collect", "--workdir", "hpcprof-runs"],
                    "submit": ["submit", "e.yaml"]}[command]
            for run in run_dirs(work / "hpcprof-runs"):
                (run / "state.stored").unlink(missing_ok=True)  # status opens the store
            result = cli(*args, "--db", f"sqlite:///{target}", cwd=work)
            side = [p.name for p in work.glob("foreign.sqlite-*")]
            if digest(target) != before or side:
                return LOST
            return one_line(result)
        return run

    def render_over(kind: str) -> Callable[[], str]:
        def run() -> str:
            work, runs = fx.copy(fx.sweep)
            exp = write_exp(work / "other.yaml", ["echo", "other"])
            if kind == "a submitted run":
                target = runs[0]
                extra = ["--force"]
            else:
                target = work / "mine"
                target.mkdir()
                (target / "job.sh").write_text("#!/bin/sh\necho my own job\n")
                (target / "config.json").write_text('{"mine": 1}')
                extra = []
            before = {p.name: digest(p) for p in target.iterdir() if p.is_file()}
            outcomes = []
            for options in ([], extra) if extra else ([],):
                result = cli("render", str(exp), "-o", str(target), *options, cwd=work)
                if {p.name: digest(p) for p in target.iterdir() if p.is_file()} != before:
                    return LOST
                outcomes.append(one_line(result))
            return worst(*outcomes)
        return run

    def render_force() -> str:
        work = fx.fresh()
        target = work / "mine"
        target.mkdir()
        (target / "notes.txt").write_text("keep me")
        result = cli("render", str(write_exp(work / "e.yaml", ["true"])), "-o", str(target), "--force", cwd=work)
        if (target / "notes.txt").read_text() != "keep me":
            return LOST
        return HANDLED if result.returncode == 0 and (target / "job.sh").is_file() else exit_class(result, 0)

    def output_is_input(command: list[str]) -> Callable[[], str]:
        def run() -> str:
            work = fx.fresh()
            export = work / "x.sqlite"
            shutil.copyfile(fx.fixtures / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite", export)
            before = digest(export)
            result = cli(*command, cwd=work)
            return LOST if digest(export) != before else one_line(result)
        return run

    return [("--db at an nsys export: status", foreign_db("status", "nsys export")),
            ("--db at an nsys export: collect", foreign_db("collect", "nsys export")),
            ("--db at an nsys export: submit", foreign_db("submit", "nsys export")),
            ("--db at a file that is not SQLite: status", foreign_db("status", "random")),
            ("render -o over a submitted run (and --force)", render_over("a submitted run")),
            ("render -o over a folder with my job.sh", render_over("my files")),
            ("render -o --force keeps the other files", render_force),
            ("nsys overlap X.sqlite -o X.sqlite", output_is_input(["nsys", "overlap", "x.sqlite", "-o", "x.sqlite"])),
            ("nsys gaps X.sqlite -o ./X.sqlite", output_is_input(["nsys", "gaps", "x.sqlite", "-o", "./x.sqlite"]))]


# ---- results silently incomplete: a rank not read is a partial collect (exit 3) ----------------

def incomplete_cases(fx: Fixtures) -> list[Case]:
    def rank1(how: str) -> Callable[[], str]:
        def run() -> str:
            work, [run_dir] = fx.copy(fx.nsys)
            profiles = run_dir / "profiles" / "nsys"
            (profiles / "rank1.sqlite").unlink()
            env: dict[str, str] = {}
            if how == "a directory":
                (profiles / "rank1.sqlite").mkdir()
            elif how == "a symlink loop":
                (profiles / "rank1.sqlite").symlink_to("rank1.sqlite")
            elif how == "a dangling link":
                (profiles / "rank1.sqlite").symlink_to("gone.sqlite")
            else:  # a .nsys-rep to export
                (profiles / "rank1.nsys-rep").write_bytes(b"report")
                config = json.loads((run_dir / "config.json").read_text())
                if how == "nsys export fails":
                    failing = work / "nsys"
                    failing.write_text("#!/bin/sh\necho 'Importer error: cannot read the report' >&2\nexit 1\n")
                    failing.chmod(0o755)
                    config["site"]["paths"]["nsys"] = str(failing)
                else:  # no nsys anywhere
                    config["site"]["paths"]["nsys"] = "nsys"
                    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
                    if shutil.which("nsys", path=env["PATH"]):
                        return f"{OTHER} (harness: nsys is in /usr/bin here)"
                (run_dir / "config.json").write_text(json.dumps(config))
            result = cli("collect", "--workdir", "hpcprof-runs", cwd=work, env=env)
            with sqlite3.connect(work / "hpcprof-runs" / "hpcprof.db") as conn:
                [(recorded,)] = conn.execute("SELECT collect_status FROM runs").fetchall()
            if not (run_dir / "results" / "nsys_cuda_gpu_kern_sum.parquet").is_file():
                return LOST  # rank 0's tables must be kept
            if result.returncode == 0 or recorded != "partial":
                return ACCEPTED
            return exit_class(result, 3)
        return run

    def garbage_exit_code() -> str:
        work, [first, second] = fx.copy(fx.sweep)
        status_file = first / "status"
        status_file.write_text(status_file.read_text().replace("exit_code=0", "exit_code=zero"))
        (first / "state.stored").unlink(missing_ok=True)
        shown = cli("status", "--format", "json", cwd=work)
        if shown.returncode != 0:
            return exit_class(shown, 0)
        states = {row["run"]: row["state"] for row in json.loads(shown.stdout)}
        if states.get(first.name) in ("RUNNING", None) or states.get(second.name) != "COMPLETED":
            return OTHER
        collected = cli("collect", cwd=work)
        return OTHER if "not collected yet" in collected.stderr else exit_class(collected, 0)

    def render(text: str, *extra: str) -> Callable[[], str]:
        def run() -> str:
            work = fx.fresh()
            path = work / "e.yaml"
            path.write_text(text)
            return one_line(cli("render", str(path), "--site", "local", *extra, cwd=work))
        return run

    base = 'name: t\nworkload:\n  kind: command\n  argv: ["true"]\n'
    big = "x" * (129 * 1024)
    many = "".join(f"  V{i}: {'y' * 120_000}\n" for i in range(10))

    def set_env_text() -> str:
        work = fx.fresh()
        result = cli("render", str(write_exp(work / "e.yaml", ["true"])), "--site", "local", "--set", "env.MODE=0755",
                     cwd=work)
        return HANDLED if result.returncode == 0 and "MODE=0755" in result.stdout else exit_class(result, 0)

    return [("rank file: nsys export fails", rank1("nsys export fails")),
            ("rank file: no nsys found", rank1("no nsys")),
            ("rank file: a directory", rank1("a directory")),
            ("rank file: a symlink loop", rank1("a symlink loop")),
            ("rank file: a dangling link", rank1("a dangling link")),
            ("finished run, garbage exit code", garbage_exit_code),
            ("sweep: repeat 1000 x 3 values", render(base + "repeat: 1000\nsweep:\n  env.A: [a, b, c]\n")),
            ("sweep: two keys set one field", render(base + "sweep:\n  env.A: [a, b]\n  env.A,env.B: [[c, d]]\n")),
            ("sweep: a key twice in a zip", render(base + "sweep:\n  env.A,env.A: [[a, b]]\n")),
            ("sweep: a field and its parent", render(base + "sweep:\n  resources: [{nodes: 1}]\n"
                                                     "  resources.nodes: [1, 2]\n")),
            ("env value over 128 KiB", render(base + f"env:\n  BIG: {big}\n")),
            ("env over 1 MiB in all", render(base + f"env:\n{many}")),
            ("env MODE: 0755", render(base + "env:\n  MODE: 0755\n")),
            ("env FLAG: yes", render(base + "env:\n  FLAG: yes\n")),
            ("env VERSION: 3.10", render(base + "env:\n  VERSION: 3.10\n")),
            ("sweep env.MODE: [0755]", render(base + "sweep:\n  env.MODE: [0755, 0644]\n")),
            ("--set env.MODE=0755 kept as text", set_env_text)]


# ---- one damaged file never hides the others ----------------------------------------------------

def isolation_cases(fx: Fixtures) -> list[Case]:
    def damaged(file: str, data: bytes, command: str) -> Callable[[], str]:
        def run() -> str:
            work, [first, second] = fx.copy(fx.sweep)
            if command in ("compare", "report"):
                cli("collect", cwd=work)
            (first / file).write_bytes(data)
            args = {"status": ["status", "--format", "json"], "report": ["report"], "compare": ["compare", "--format", "json"],
                    "resubmit": ["resubmit", first.name.rsplit("-p", 1)[0]]}[command]
            result = cli(*args, cwd=work)
            if "Traceback" in result.stderr:
                return TRACEBACK
            if command == "resubmit":
                ok = result.returncode == 0 and len(run_dirs(work / "hpcprof-runs")) == 3
            else:
                ok = result.returncode == 0 and second.name in result.stdout
            if not ok:
                return BLOCKED
            if file == "state.stored":  # a cache of the store: written again, nothing to say
                return HANDLED if (first / file).read_bytes() != data else OTHER
            named = file in result.stderr + result.stdout and first.name in result.stderr + result.stdout
            return HANDLED if named else OTHER
        return run

    def cancel_damaged() -> str:
        work, [first, second] = fx.copy(fx.sweep)
        (first / "submission.json").write_bytes(b"\x00garbage")
        result = cli("cancel", first.name, second.name, cwd=work)
        if "Traceback" in result.stderr:
            return TRACEBACK
        if second.name not in result.stderr.replace("Error:", ""):
            return BLOCKED
        return worst(one_line(result), HANDLED if "submission.json" in result.stderr else OTHER)

    def broken_site() -> str:
        work = fx.fresh()
        (work / "broken.yaml").write_text("name: [\n")
        (work / "fine.yaml").write_text("name: fine\nscheduler: local\nlauncher: {kind: torchrun}\n")
        result = cli("sites", cwd=work, env={"HPCPROF_SITE_PATH": str(work)})
        if "Traceback" in result.stderr:
            return TRACEBACK
        if result.returncode != 0 or "fine" not in result.stdout or "polaris" not in result.stdout:
            return BLOCKED
        return HANDLED if "broken.yaml" in result.stderr else OTHER

    def damaged_cache(how: str) -> Callable[[], str]:
        def run() -> str:
            work, [run_dir] = fx.copy(fx.nsys)
            first = cli("collect", cwd=work)
            if first.returncode != 0:
                return OTHER
            kern = run_dir / "results" / "nsys_cuda_gpu_kern_sum.parquet"
            expected = digest(kern)
            part = sorted((run_dir / "derived" / "nsys" / "parts").glob("*.arrow"))[0]  # one bundle per rank file
            data = part.read_bytes()
            if how == "truncated":
                part.write_bytes(data[:len(data) // 2])
            elif how == "empty":
                part.write_bytes(b"")
            else:  # garbage inside, the tail (Arrow IPC footer) intact
                part.write_bytes(data[:4] + os.urandom(len(data) // 2 - 4) + data[len(data) // 2:])
            again = [cli("collect", run_dir.name, cwd=work)]  # named: collected again, the part made again
            if any("Traceback" in r.stderr for r in again):
                return TRACEBACK
            if any(r.returncode != 0 for r in again):
                return BLOCKED
            import pyarrow.parquet as pq

            same = pq.read_table(kern).equals(pq.read_table(run_dir / "results" / "nsys_cuda_gpu_kern_sum.parquet")) \
                if digest(kern) != expected else True
            return HANDLED if same else LOST
        return run

    return [("status file not UTF-8: status", damaged("status", b"start=1\nexit_code=\xff\xfe\n", "status")),
            ("state.stored not UTF-8: status", damaged("state.stored", b"\xff\xfe", "status")),
            ("config.json {bad: report", damaged("config.json", b"{bad", "report")),
            ("config.json {}: report", damaged("config.json", b"{}", "report")),
            ("config.json {bad: compare", damaged("config.json", b"{bad", "compare")),
            ("config.json {}: compare", damaged("config.json", b"{}", "compare")),
            ("config.json not UTF-8: status", damaged("config.json", b"\xff{", "status")),
            ("config.json {}: resubmit the sweep", damaged("config.json", b"{}", "resubmit")),
            ("submission.json damaged: cancel", cancel_damaged),
            ("a broken site YAML on $HPCPROF_SITE_PATH", broken_site),
            ("collect cache: a part truncated", damaged_cache("truncated")),
            ("collect cache: a part empty", damaged_cache("empty")),
            ("collect cache: garbage inside a part", damaged_cache("garbage"))]


# ---- tracebacks and leftovers ------------------------------------------------------------------

def full_disk(work: Path, free: int, args: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `hpcprof ARGS` in `work` with `work/full` a 256 KiB tmpfs holding only `free` bytes
    (a private mount: `unshare -rm`, or as root unshare -m); returns the result and what the
    command left on that filesystem."""
    mount = work / "full"
    mount.mkdir()
    left = work / "left.txt"
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "hpcprof", *args])
    script = (f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(mount))} || exit 99; "
              f"head -c {256 * 1024 - free} /dev/zero > {shlex.quote(str(mount / 'filler'))} 2>/dev/null; "
              f"ls -A {shlex.quote(str(mount))} > {shlex.quote(str(work / 'before.txt'))}; "
              f"cd {shlex.quote(str(work))}; {command}; rc=$?; "
              f"find {shlex.quote(str(mount))} -mindepth 1 ! -name filler "
              f"-printf '%P %s\\n' > {shlex.quote(str(left))}; exit $rc")
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    result = subprocess.run([*unshare, "sh", "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    if result.returncode == 99:
        raise RuntimeError(f"no tmpfs here: {result.stderr.strip()[:200]}")
    return result, [line for line in left.read_text().splitlines() if line] if left.exists() else []


def leftover_cases(fx: Fixtures) -> list[Case]:
    def disk_full(label: str, free: int) -> Callable[[], str]:
        def run() -> str:
            work = fx.fresh()
            exp = write_exp(work / "e.yaml", ["true"], SWEEP if "sweep" in label else "")
            shutil.copyfile(fx.fixtures / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite", work / "x.sqlite")
            if label == "compare -o":
                base, _ = fx.copy(fx.sweep)
                cli("collect", cwd=base)
                shutil.move(str(base / "hpcprof-runs"), work / "hpcprof-runs")
            args = {"render -o": ["render", str(exp), "-o", "full/run"],
                    "render -o, a sweep": ["render", str(exp), "-o", "full/runs"],
                    "templates copy": ["templates", "copy", "full/templates"],
                    "nsys stats -o": ["nsys", "stats", "-r", "cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,osrt_sum",
                                      "--format", "json", "x.sqlite", "-o", "full/stats"],
                    "compare -o": ["compare", "-o", "full/compare.txt"]}[label]
            result, left = full_disk(work, free, args)
            if label == "nsys stats -o":  # the reports written before the disk filled are whole results
                left = [entry for entry in left if entry.endswith(" 0") or ".tmp" in entry]
            if left:
                return f"{LEFT} ({', '.join(left[:3])})"
            if result.returncode == 0:
                return f"{OTHER} (harness: the disk did not fill)"
            outcome = one_line(result)
            if outcome == HANDLED and "full/" not in result.stderr:
                return f"{OTHER} (the path is not named: {result.stderr.strip()[:100]})"
            return outcome
        return run

    def signalled(sig: signal.Signals) -> str:
        """Signal a collect the moment one of its temporary files exists (polled every 2 ms;
        after 3 collects that ended first, at half their time)."""
        work, [run_dir] = fx.copy(fx.nsys)
        for attempt in range(3):
            shutil.rmtree(run_dir / "derived", ignore_errors=True)
            shutil.rmtree(run_dir / "results", ignore_errors=True)
            proc = subprocess.Popen([sys.executable, "-m", "hpcprof", "collect", run_dir.name],
                                    cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            started = time.monotonic()
            while proc.poll() is None and not temporaries(run_dir):
                time.sleep(0.002)
            if proc.poll() is not None:
                if attempt < 2:
                    continue
                shutil.rmtree(run_dir / "results", ignore_errors=True)
                proc = subprocess.Popen([sys.executable, "-m", "hpcprof", "collect", run_dir.name],
                                        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                time.sleep((time.monotonic() - started) / 2)
            delay = time.monotonic() - started
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
            if "Traceback" in err and sig != signal.SIGTERM:
                return TRACEBACK
            if sig == signal.SIGKILL:
                again = cli("collect", run_dir.name, cwd=work)
                if again.returncode != 0:
                    return BLOCKED
            if left := temporaries(run_dir):
                return f"{LEFT} ({left[0].name} after {sig.name} at {delay:.1f} s)"
            return HANDLED
        return HANDLED

    def unstored_runs(work: Path) -> None:  # runs whose state the store does not hold yet: status opens it
        shutil.copytree(fx.sweep / "hpcprof-runs", work / "w", symlinks=True)
        for path in (work / "w").rglob("state.stored"):
            path.unlink()
        (work / "w" / "hpcprof.db").unlink()

    def creates_nothing(args: list[str], setup: Callable[[Path], None] | None = None) -> Callable[[], str]:
        def run() -> str:
            work = fx.fresh()
            if setup:
                setup(work)
            before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
            result = cli(*args, cwd=work)
            after = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
            if after != before:
                return f"{LEFT} ({', '.join(sorted(set(after) - set(before))[:3])})"
            return one_line(result) if result.returncode != 0 else HANDLED
        return run

    def no_psycopg() -> str:
        work = fx.fresh()
        blocker = work / "block" / "psycopg"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
        env = {"PYTHONPATH": os.pathsep.join([str(work / "block"), os.environ.get("PYTHONPATH", "")])}
        result = cli("status", "--workdir", "w", "--db", "postgresql+psycopg://u@localhost/x", cwd=work, env=env)
        result2 = cli("submit", str(write_exp(work / "e.yaml", ["true"])), "--db", "postgresql://u@localhost/x",
                      cwd=work, env=env)
        line = worst(one_line(result2), HANDLED if "[postgresql]" in result2.stderr else OTHER)
        return worst(line, LEFT if (work / "hpcprof-runs").exists() else HANDLED,
                     TRACEBACK if "Traceback" in result.stderr else HANDLED)

    def template(body: str, check: Callable[[Path, subprocess.CompletedProcess[str]], str] | None = None) -> Callable[[], str]:
        def run() -> str:
            work = fx.fresh()
            cli("templates", "copy", "t", cwd=work)
            job = work / "t" / "local.sh.j2"
            text = job.read_text().splitlines(keepends=True)
            (job).write_text("".join(text[:3]) + body + "\n" + "".join(text[3:]))
            result = cli("render", str(write_exp(work / "e.yaml", ["true"])), "--templates", "t", cwd=work)
            if (work / "PWNED").exists():
                return LOST
            outcome = one_line(result)
            if outcome == HANDLED and "local.sh.j2:4" not in result.stderr:
                return f"{OTHER} (no file:line: {result.stderr.strip()[:120]})"
            return outcome
        return run

    def sites_escape() -> str:
        work = fx.fresh()
        (work / "ansi.yaml").write_text('name: ansi\ndescription: "\\e]0;owned\\a\\e[2J\\e[31mred"\nscheduler: local\n'
                                        "launcher: {kind: torchrun}\n")
        result = cli("sites", cwd=work, env={"HPCPROF_SITE_PATH": str(work)})
        if result.returncode != 0:
            return exit_class(result, 0)
        return HANDLED if "\x1b" not in result.stdout and "ansi" in result.stdout else OTHER

    def site_outside() -> str:
        work = fx.fresh()
        (work / "sites").mkdir()
        (work / "evil.yaml").write_text("name: evil\nscheduler: local\nlauncher: {kind: torchrun}\n")
        result = cli("render", str(write_exp(work / "e.yaml", ["true"])), "--site", "../evil", cwd=work,
                     env={"HPCPROF_SITE_PATH": str(work / "sites")})
        return one_line(result)

    def huge_value() -> str:
        work = fx.fresh()
        path = work / "e.yaml"
        path.write_text(f"name: '{'n' * 1_000_000}'\nworkload:\n  kind: command\n  argv: [\"true\"]\n")
        result = cli("render", str(path), cwd=work)
        longest = max((len(line) for line in result.stderr.splitlines()), default=0)
        return worst(one_line(result), HANDLED if longest < 4000 else f"{OTHER} (an error line of {longest} chars)")

    def merge_keys_ok() -> str:
        work = fx.fresh()
        path = work / "e.yaml"
        path.write_text('name: t\nworkload:\n  kind: command\n  argv: ["true"]\nresources: &r\n  nodes: 1\n'
                        'env:\n  <<: {A: "1", B: "2"}\n  B: "3"\n')
        result = cli("render", str(path), cwd=work)
        if result.returncode != 0:
            return exit_class(result, 0)
        return HANDLED if "A=1" in result.stdout and "B=3" in result.stdout else OTHER

    return [("disk full: render -o", disk_full("render -o", 8192)),
            ("disk full: render -o, a sweep", disk_full("render -o, a sweep", 16384)),
            ("disk full: templates copy", disk_full("templates copy", 12288)),
            ("disk full: nsys stats -o", disk_full("nsys stats -o", 4096)),
            ("disk full: compare -o", disk_full("compare -o", 0)),
            ("SIGTERM mid-collect", lambda: signalled(signal.SIGTERM)),
            ("SIGKILL mid-collect, collect again", lambda: signalled(signal.SIGKILL)),
            ("status --db sqlite:///new.db creates nothing",
             creates_nothing(["status", "--workdir", "w", "--db", "sqlite:///new.db"], unstored_runs)),
            ("collect with no runs creates nothing",
             creates_nothing(["collect", "--workdir", "w"], lambda w: (w / "w").mkdir())),
            ("collect, missing --workdir, creates nothing", creates_nothing(["collect", "--workdir", "w"])),
            ("submit --db bogus:// creates nothing",
             creates_nothing(["submit", "e.yaml", "--db", "bogus://"], lambda w: write_exp(w / "e.yaml", ["true"]))),
            ("--db postgresql:// without psycopg", no_psycopg),
            ("template {{ 1 // 0 }}", template("{{ 1 // 0 }}")),
            ("template {{ 1 + 'a' }}", template("{{ 1 + 'a' }}")),
            ("template sandbox escape", template("{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}")),
            ("sites: terminal escapes in a description", sites_escape),
            ("--site ../evil outside the site dirs", site_outside),
            ("a 1 MB bad value", huge_value),
            ("YAML merge keys accepted", merge_keys_ok)]


def fault_cases(tmp: Path, fixtures: Path) -> list[Case]:
    fx = Fixtures(tmp, fixtures)
    return [*((f"touched: {n}", c) for n, c in touched_cases(fx)),
            *((f"incomplete: {n}", c) for n, c in incomplete_cases(fx)),
            *((f"isolation: {n}", c) for n, c in isolation_cases(fx)),
            *((f"leftovers: {n}", c) for n, c in leftover_cases(fx))]
