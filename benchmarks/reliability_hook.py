"""The `hook` group of benchmarks/reliability.py: hostile programs under hpcprof's start-up hook
(hpcprof/inject), class 9. Each small program runs twice, plainly and under the hook as the rank
wrapper arms it (its directory first on PYTHONPATH, the HPCPROF_* variables of forensics and the
optimizer step hook), and must behave byte for byte the same: stdout, stderr, exit code and the
files it writes, apart from hpcprof's own files and at most the one `hpcprof:` line on stderr of a
hook that steps aside. Addresses (0x...) and the two working directories are masked. A case's own
check adds what hpcprof must (not) have written. Then an experiment or site `env` that sets an
HPCPROF_* variable: refused at render with one line.

tests/test_hook_invisible.py runs every case; `python benchmarks/reliability.py --group hook` counts them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reliability_common import ACCEPTED, BLOCKED, HANDLED, LOST, OTHER, REPO, TRACEBACK, cli, one_line

INJECT = REPO / "hpcprof" / "inject"
#: permission bits hold for root too (no CAP_DAC_OVERRIDE), as in reliability_silent
PLAIN_USER = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
#: what the rank wrapper exports for forensics and the step hook (hpcprof.render.forensics, .steps)
HOOK_ENV = {"HPCPROF_RANK": "0", "HPCPROF_LOCAL_RANK": "0", "HPCPROF_FORENSICS": "1", "HPCPROF_FORENSICS_POLL": "0.1",
            "HPCPROF_FORENSICS_WAIT": "0", "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "2", "HPCPROF_STEPS_COUNT": "2",
            "HPCPROF_PROFILE_TOOL": "none"}
#: a torch program's start takes 20-25 s under a load of 20 on 2 cores: a hang is one past this
TIMEOUT = 120
#: (plain, hooked) extra environment a case's setup gives, from (case root, run directory, inject directory)
Setup = Callable[[Path, Path, Path], tuple[dict[str, str], dict[str, str]]]
#: a case's own check of the hooked run (its run directory, working directory): what is wrong, or None
Check = Callable[[Path, Path], "str | None"]

TRAIN = """import torch
torch.manual_seed(0)
m = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def step():
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@dataclass
class Program:
    """A hostile program and what running it under the hook may differ in."""

    label: str
    code: str
    env: dict[str, str] = field(default_factory=dict)     # both runs' (PYTHONFAULTHANDLER)
    hook_env: dict[str, str] = field(default_factory=dict)  # over HOOK_ENV
    setup: Setup | None = None
    check: Check | None = None
    lines: int = 0                      # `hpcprof:` lines the hooked run may print (a hook stepping aside)
    said: str = ""                      # what its line must name (a bad setting: the variable)
    vary: tuple[str, ...] = ()          # files the program writes whose bytes differ from run to run
    closed_stderr: bool = False
    plain_user: bool = False            # run without CAP_DAC_OVERRIDE: permission bits hold


@dataclass
class Ran:
    rc: int | None                      # None: still running at TIMEOUT
    stdout: str
    stderr: str
    hpcprof: list[str]                  # the `hpcprof:` lines taken out of stderr
    files: dict[str, bytes]


def mask(text: str, work: Path) -> str:
    """Addresses and the working directory masked; Kineto's USDT lines (a time and pid each) left out."""
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("USDT:"))
    return re.sub(r"0x[0-9a-f]{6,}", "0x?", text.replace(str(work), "<work>"))


def run(program: Program, root: Path, hooked: bool) -> tuple[Ran, Path, Path]:
    """The program once, in its own working directory; with `hooked`, under the hook."""
    base = root / ("hooked" if hooked else "plain")
    work, run_dir, inject = base / "work", base / "run", base / "inject"
    work.mkdir(parents=True)
    shutil.copytree(INJECT, inject, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    for sub in ("logs", "profiles/torch", "results", "tmp"):
        (run_dir / sub).mkdir(parents=True)
    (work / "prog.py").write_text(program.code)
    plain_env, hook_env = program.setup(base, run_dir, inject) if program.setup else ({}, {})
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8",
           "HOME": str(base), **program.env, **plain_env}
    if hooked:
        env = {**env, **HOOK_ENV, "PYTHONPATH": str(inject), "HPCPROF_RUN_DIR": str(run_dir),
               "HPCPROF_PROFILE_DIR": str(run_dir / "profiles" / "torch"), **program.hook_env, **hook_env}
    argv = [*(PLAIN_USER if program.plain_user else []), sys.executable, "prog.py"]
    if program.closed_stderr:
        argv = ["sh", "-c", 'exec "$@" 2>&-', "sh", *argv]
    try:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    lines = mask(err, work).splitlines(keepends=True)
    ours = [line for line in lines if line.startswith("hpcprof: ")]
    files = {str(p.relative_to(work)): (b"" if p.name in program.vary else p.read_bytes())
             for p in sorted(work.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    return Ran(rc, mask(out, work), "".join(line for line in lines if line not in ours), ours, files), run_dir, work


def compare(program: Program, root: Path) -> str:
    """HANDLED when the hooked run behaves as the plain one, else the class and what differs."""
    plain, _, _ = run(program, root, hooked=False)
    hooked, run_dir, work = run(program, root, hooked=True)
    if hooked.rc is None and plain.rc is not None:
        return f"{BLOCKED} (still running after {TIMEOUT} s)"
    if hooked.stderr.count("Traceback") > plain.stderr.count("Traceback"):
        return f"{TRACEBACK} ({hooked.stderr.strip().splitlines()[-1][:200]})"
    if hooked.files != plain.files:
        changed = sorted(set(hooked.files.items()) ^ set(plain.files.items()))
        return f"{LOST} (files differ: {', '.join(sorted({name for name, _ in changed}))})"
    if hooked.rc != plain.rc:
        return f"{OTHER} (exit {hooked.rc}, plainly {plain.rc})"
    if (hooked.stdout, hooked.stderr) != (plain.stdout, plain.stderr):
        return f"{OTHER} (output differs: {hooked.stdout[-200:]!r} {hooked.stderr[-200:]!r}, plainly " \
               f"{plain.stdout[-200:]!r} {plain.stderr[-200:]!r})"
    if len(hooked.hpcprof) > program.lines:
        return f"{OTHER} ({len(hooked.hpcprof)} hpcprof lines: {''.join(hooked.hpcprof)[:300]!r})"
    if program.said and program.said not in "".join(hooked.hpcprof):
        return f"{ACCEPTED} (no line names {program.said})"
    problem = program.check(run_dir, work) if program.check else None
    return f"{OTHER} ({problem})" if problem else HANDLED


def forensics_files(run_dir: Path) -> set[str]:
    directory = run_dir / "forensics"
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def no_record(run_dir: Path, work: Path) -> str | None:
    """No exception recorded, no dump asked of the other ranks."""
    found = forensics_files(run_dir) & {"exception_rank0.json", "dump.request", "first_exception"}
    return f"recorded as uncaught: {sorted(found)}" if found else None


def exception_recorded(kind: str) -> Check:
    def check(run_dir: Path, work: Path) -> str | None:
        path = run_dir / "forensics" / "exception_rank0.json"
        if not path.is_file():
            return "no exception record"
        return None if json.loads(path.read_text())["type"] == kind else f"recorded {path.read_text()[:200]}"
    return check


def not_recreated(run_dir: Path, work: Path) -> str | None:
    return f"{run_dir} recreated" if run_dir.exists() else None


def removed_run_dir(base: Path, run_dir: Path, inject: Path) -> tuple[dict[str, str], dict[str, str]]:
    shutil.rmtree(run_dir)
    return {}, {}


def read_only_run_dir(base: Path, run_dir: Path, inject: Path) -> tuple[dict[str, str], dict[str, str]]:
    for path in (run_dir, *run_dir.rglob("*")):
        path.chmod(0o555)
    return {}, {}


def steps_not_a_directory(base: Path, run_dir: Path, inject: Path) -> tuple[dict[str, str], dict[str, str]]:
    (run_dir / "steps").write_text("")
    return {}, {}


def linked_twice(base: Path, run_dir: Path, inject: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The hook on PYTHONPATH twice (its directory, a link to it), then the user's own sitecustomize."""
    user = base / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("print('the user\\'s sitecustomize ran', flush=True)\n")
    (base / "link").symlink_to(inject)
    return {"PYTHONPATH": str(user)}, {"PYTHONPATH": f"{inject}:{base / 'link'}:{user}"}


def steps_and_dumps_kept_out(run_dir: Path, work: Path) -> str | None:
    steps = (run_dir / "steps" / "rank0.jsonl").read_text().splitlines() if (run_dir / "steps").is_dir() else []
    stacks = run_dir / "forensics" / "stacks_rank0.txt"
    if len(steps) != 6:
        return f"{len(steps) - 1} steps recorded of 5"
    return None if stacks.is_file() and "(hang)" in stacks.read_text() else "the requested stack dump is missing"


def nothing_outside(run_dir: Path, work: Path) -> str | None:
    outside = sorted(p.name for p in run_dir.parent.iterdir() if p.name not in ("work", "run", "inject"))
    return f"written beside the run directory: {outside}" if outside else None


CHILD_TERM = """import os, signal, time
def on_term(number, frame):
    print("the child's own SIGTERM handler", flush=True)
    os._exit(7)
signal.signal(signal.SIGTERM, on_term)
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(0)
print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
CHILD_FAULTHANDLER = """import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, file=sys.stdout, all_threads=False)
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)
    print("the child goes on", flush=True)
    os._exit(0)
print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
CHILD_CRASH = """import ctypes, os
pid = os.fork()
if pid == 0:
    ctypes.string_at(0)
print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
HANDLED_ERRORS = """import code, sys, time
start = time.monotonic()
interpreter = code.InteractiveInterpreter()
for _ in range(3):
    interpreter.runsource("1/0")
try:
    {}["missing"]
except KeyError:
    sys.excepthook(*sys.exc_info())   # a logging helper's way to show a handled error
print("shown at once:", time.monotonic() - start < 1.5)
"""
CHAINED_UNCAUGHT = """import sys
previous = sys.excepthook
def library_hook(kind, value, tb):   # torch.distributed's way: a prefix, then the hook before it
    sys.stderr.write("[rank0]: ")
    previous(kind, value, tb)
sys.excepthook = library_hook
raise KeyError("uncaught")
"""
REEXEC = """import os, sys
if len(sys.argv) == 1:
    os.execv(sys.executable, [sys.executable, "prog.py", "again"])
raise ValueError("raised after re-executing itself")
"""
JOIN_ALL = """import threading
for thread in threading.enumerate():
    if thread is not threading.main_thread():
        thread.join()
print("joined; threads:", threading.active_count())
"""
FORK_GUARD = """import os, threading
if threading.active_count() == 1:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("forked")
else:
    print("refused to fork with", threading.active_count(), "threads")
"""
CLOSERANGE = TRAIN + """import os, time
step()
os.closerange(3, 65536)
out = open("data.txt", "w")
out.write("mine\\n")
out.flush()
for _ in range(4):
    step()
run = os.environ.get("HPCPROF_RUN_DIR")
if run:  # what `hpcprof logs --hang` does: every rank dumps its stacks
    with open(os.path.join(run, "forensics", "dump.request"), "w") as fh:
        fh.write("hang\\n")
    time.sleep(1)
out.write("end\\n")
out.close()
print(open("data.txt").read())
"""
OWN_PROFILER = TRAIN + """prof = None
for i in range(8):
    step()
    if i == 1:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
prof.stop()
prof.export_chrome_trace("mine.json")
import json
print("own trace:", any(e.get("name") == "aten::linear" for e in json.load(open("mine.json"))["traceEvents"]))
"""
TRAINS = TRAIN + """for _ in range(4):
    step()
print("trained", m.weight.sum().item())
"""
RMTREE_TRAINS = TRAIN + """import os, shutil
if os.environ.get("HPCPROF_RUN_DIR"):  # removed while the job runs
    shutil.rmtree(os.environ["HPCPROF_RUN_DIR"])
for _ in range(4):
    step()
print("trained", m.weight.sum().item())
"""
HELLO = "print('hello')\n"
SLEEPS = """import time
time.sleep(0.5)
print("slept")
"""
RAISES = "raise RuntimeError('failed')\n"
TORCH_PROFILE = {"HPCPROF_PROFILE_TOOL": "torch", "HPCPROF_STEPS_DRIVE": "1", "HPCPROF_STEPS_SKIP": "4"}


def setting(name: str, value: str, code: str = HELLO, note: str = "", env: dict[str, str] | None = None,
            check: Check | None = None) -> Program:
    """A bad value of one of the hook's variables: the hook steps aside with one line naming it."""
    return Program(f"setting: {name}={value}{note}", code, lines=1, said=name, hook_env={**(env or {}), name: value},
                   check=check)


PROGRAMS = [
    Program("own torch.profiler started after step 2, before the hook's would", OWN_PROFILER, lines=1,
            said="its own torch.profiler", vary=("mine.json",),
            hook_env={**TORCH_PROFILE, "HPCPROF_TORCH_SCHEDULE": "warmup=1"}),
    Program("fork: the program's SIGTERM handler in its child", CHILD_TERM),
    Program("fork: the program's faulthandler registration in its child", CHILD_FAULTHANDLER),
    Program("fork: PYTHONFAULTHANDLER=1 prints a crashed child's stack", CHILD_CRASH, env={"PYTHONFAULTHANDLER": "1"}),
    Program("excepthook: handled errors shown through sys.excepthook", HANDLED_ERRORS, check=no_record,
            hook_env={"HPCPROF_FORENSICS_WAIT": "2.5"}),
    Program("excepthook: an uncaught exception through a library's chained hook is recorded", CHAINED_UNCAUGHT,
            check=exception_recorded("KeyError")),
    Program("exec: a program that re-executes itself keeps its exception record", REEXEC,
            check=exception_recorded("ValueError")),
    Program("threads: join every thread but the main one", JOIN_ALL),
    Program("threads: a fork-safety guard counting threads", FORK_GUARD),
    Program("descriptors: closerange, then the program's own files", CLOSERANGE, check=steps_and_dumps_kept_out),
    Program("run directory removed before the start: not recreated", HELLO, lines=1, said="not armed",
            setup=removed_run_dir, check=not_recreated),
    Program("run directory removed while training: not recreated", RMTREE_TRAINS, lines=1, check=not_recreated),
    Program("run directory read-only: Python starts", HELLO, lines=1, said="not armed", setup=read_only_run_dir,
            plain_user=True),
    Program("closed stderr: a hook failure never raises out of optimizer.step()", TRAINS, closed_stderr=True,
            setup=steps_not_a_directory),
    Program("sitecustomize reached twice through a link; the user's own runs", HELLO, setup=linked_twice),
    setting("HPCPROF_FORENSICS_POLL", "0", SLEEPS, " (a spinning watcher)"),
    setting("HPCPROF_FORENSICS_POLL", "nan", SLEEPS),
    setting("HPCPROF_FORENSICS_POLL", "-1", SLEEPS),
    setting("HPCPROF_FORENSICS_WAIT", "1e9", RAISES, " and an uncaught exception"),
    setting("HPCPROF_RANK", "../../escape", check=nothing_outside),
    setting("HPCPROF_RANK", "\u0661", note=" (an Arabic-Indic digit)"),
    setting("HPCPROF_STEPS_SKIP", "abc"),
    setting("HPCPROF_STEPS_COUNT", "-3"),
    setting("HPCPROF_TORCH_SCHEDULE", "warmup=x", TRAINS, " under profile.tool torch", TORCH_PROFILE),
]
#: an experiment `env` that sets one of the hook's own variables: (where, YAML)
RESERVED = {
    "experiment env": "env:\n  HPCPROF_FORENSICS_POLL: '0'\n",
    "experiment env, the run directory": "env:\n  HPCPROF_RUN_DIR: /tmp\n",
}


def refused_naming(result: subprocess.CompletedProcess[str]) -> str:
    """one_line's class, and HANDLED only where the error names an HPCPROF_ variable and the field."""
    outcome = one_line(result)
    if outcome == HANDLED and not re.search(r"field 'env'.*HPCPROF_[A-Z_]+", result.stderr):
        return f"{OTHER} (refused for another reason: {result.stderr.strip()[-200:]})"
    return outcome


def render_refused(tmp: Path, extra: str) -> Callable[[], str]:
    def case() -> str:
        work = Path(tempfile.mkdtemp(dir=tmp))
        (work / "e.yaml").write_text(f"name: t\nworkload:\n  kind: command\n  argv: [\"true\"]\n{extra}")
        return refused_naming(cli("render", "e.yaml", "--site", "local", "--workdir", "w", cwd=work))
    return case


def site_refused(tmp: Path) -> Callable[[], str]:
    def case() -> str:
        work = Path(tempfile.mkdtemp(dir=tmp))
        (work / "sites").mkdir()
        (work / "sites" / "mine.yaml").write_text("name: mine\nscheduler: local\nlauncher:\n  kind: mpiexec\n"
                                                  "  flavor: hydra\nenv:\n  HPCPROF_STEPS: '1'\n")
        (work / "e.yaml").write_text("name: t\nworkload:\n  kind: command\n  argv: [\"true\"]\n")
        return refused_naming(cli("render", "e.yaml", "--site-file", "sites/mine.yaml", "--workdir", "w", cwd=work))
    return case


def hook_cases(tmp: Path, fixtures: Path) -> list[tuple[str, Callable[[], str]]]:
    def attempt(program: Program) -> Callable[[], str]:
        return lambda: compare(program, Path(tempfile.mkdtemp(dir=tmp)))

    return [*((f"class 9: {p.label}", attempt(p)) for p in PROGRAMS),
            *((f"class 9: {where}: refused at render", render_refused(tmp, extra))
              for where, extra in RESERVED.items()),
            ("class 9: site env: refused at render", site_refused(tmp))]
