"""What each rank left besides its Flight Recorder: its stacks (faulthandler's text in
`forensics/stacks_rank<N>.txt`), its uncaught exception (`forensics/exception_rank<N>.json`), the
error line of its log (a Python traceback's last line, a fatal Python error, a C++ exception, a
CUDA, NCCL or out-of-memory error; searched in the log's last LOG_BYTES, past profiler output such
as nsys's export progress) and what its launcher said of it in the job log (srun, Hydra, Open MPI,
PALS, torchrun: an exit code or a signal).
"""

from __future__ import annotations

import json
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcprof.analysis.forensics.checks import Job, RecordError, check_exception, integer
from hpcprof.run.ranks import rank_in_name

#: how much of the end of a rank log (and of the job log) is searched
LOG_BYTES = 1 << 16
#: errors that follow from another rank's failure, not causes: a collective that timed out or lost its peer
CONSEQUENCE = re.compile(
    r"Timed out waiting|timed out|Connection (closed by peer|reset by peer|refused)|Broken pipe|Read error|"
    r"Watchdog caught collective operation timeout|communicator was aborted|DistNetworkError|DistStoreError|"
    r"Socket Timeout|remote (process|peer|worker)|KeyboardInterrupt|^SIGTERM|killed by SIG(TERM|PIPE)|"
    r"terminated by the launcher", re.I)
#: a frame of Python itself or of an installed package: the rank's "where" is the innermost frame that is not
HOOK = re.compile(r"/inject/_hpcprof_forensics\.py$")
LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d[\d.]*/|^<|/inject/(sitecustomize|_hpcprof_forensics)\.py$")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Fault)|[\w.]+Error)(: .*)?$")
_ERROR_LINES = [re.compile(p) for p in (
    r"Fatal Python error: .+", r"terminate called after throwing an instance of .+", r"\bCUDA error: .+",
    r"\bCUDA out of memory.*", r"\bNCCL error\b.*", r"\bnccl\w*Error\b.*", r"\bstd::bad_alloc\b.*",
    r"\bSegmentation fault\b.*", r"\bBus error\b.*")]
#: faulthandler's names of the fatal signals it catches
FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Floating-point exception": "SIGFPE",
                 "Floating point exception": "SIGFPE", "Bus error": "SIGBUS", "Illegal instruction": "SIGILL"}
#: srun's words for the signal that ended a task
SIGNAL_WORDS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6, "Bus error": 7,
                "Floating point exception": 8, "Illegal instruction": 4}
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):$|^Stack \(most recent call first\):$")
_STARTED = re.compile(r"^# hpcprof: rank ([0-9]+) pid ([0-9]+) host (\S+) started ([0-9.]+)$")
_DUMPED = re.compile(r"^# hpcprof: stacks of rank \d+ pid \d+ at ([\d.]+) \((.*)\); main thread (0x[0-9a-fA-F]+)$")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def text(self, base: Path | None = None) -> str:
        """`train.py:212 load_batch`: the path relative to `base` (where the ranks started) when under it."""
        path = Path(self.file)
        try:
            shown = str(path.relative_to(base)) if base is not None and path.is_absolute() else path.name
        except ValueError:
            shown = path.name
        return f"{shown}:{self.line} {self.function}"


def where(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the program's own code (innermost-first `frames`), else the innermost;
    None for the stack of hpcprof's own hook (its watcher thread, current where NCCL's watchdog
    aborted the process): never the program's place."""
    own = next((f for f in frames if not LIBRARY.search(f.file)), None)
    if own is None and any(HOOK.search(f.file) for f in frames):
        return None
    return own or (frames[0] if frames else None)


@dataclass
class StackBlock:
    """One dump of a rank's stacks: the hook's (`dump`, at a time, for a reason), Python's fatal
    error (`fatal`: `Segmentation fault`, ...) or faulthandler's on SIGUSR1 (`signal`)."""

    kind: str
    time: float | None
    reason: str
    frames: list[Frame]              # the main (or crashing) thread's, innermost first


def parse_stacks(text: str) -> tuple[dict[str, Any], list[StackBlock]]:
    """The process line (`pid`, `host`, `started`) and the stack blocks of a stacks file."""
    process: dict[str, Any] = {}
    blocks: list[StackBlock] = []
    threads: list[tuple[str, bool, list[Frame]]] = []
    main_id = ""

    def close() -> None:
        """The block's thread: the main one (named by the hook), else the crashing one, else the one
        that runs a module (not the hook's watcher)."""
        if blocks and threads:
            own = [t for t in threads if t[2] and not any(HOOK.search(f.file) for f in t[2])] or threads
            chosen = next((t for t in threads if main_id and t[0].lower() == main_id.lower()), None) \
                or next((t for t in own if t[1]), None) \
                or next((t for t in own if t[2] and (t[2][-1].function == "<module>"
                                                     or t[2][-1].file.endswith("runpy.py"))), own[0])
            blocks[-1].frames = chosen[2]

    for line in text.splitlines():
        if match := _STARTED.match(line):
            process = {"rank": int(match[1]), "pid": int(match[2]), "host": match[3], "started": float(match[4])}
        elif match := _DUMPED.match(line):
            close()
            threads, main_id = [], match[3]
            blocks.append(StackBlock("dump", float(match[1]), match[2], []))
        elif line.startswith("Fatal Python error: "):
            close()
            threads, main_id = [], ""
            blocks.append(StackBlock("fatal", None, line.removeprefix("Fatal Python error: ").strip(), []))
        elif match := _THREAD.match(line):
            ident, current = match[2] or "", match[1] == "Current thread" or match[1] is None
            earlier = next((t for t in threads if t[0] == ident), None)
            # a dump lists each thread once; but a thread started and not yet run carries its creator's
            # ident (Python 3.11), without a frame, before the creator's own entry as the current thread
            if earlier is not None and not earlier[2] and current:
                threads.remove(earlier)
            elif not blocks or earlier:
                close()
                threads, main_id = [], ""
                blocks.append(StackBlock("signal", None, "SIGUSR1", []))
            threads.append((ident, current, []))
        elif (match := _FRAME.match(line)) and threads:
            threads[-1][2].append(Frame(match[1], int(match[2]), match[3]))
    close()
    return process, blocks


def read_text_tail(path: Path, size: int = LOG_BYTES) -> str:
    """The last `size` bytes of a regular file as text ('' when it cannot be read, or is a FIFO or a
    device: safe_paths.read_tail, never waited on nor read without bound)."""
    from hpcprof.core.safe_paths import read_tail

    try:
        return read_tail(path, size).decode(errors="replace")
    except OSError:
        return ""


def error_line(text: str) -> str | None:
    """The error a log ends with: the last Python exception line after a traceback, else the last
    fatal error, C++ exception, CUDA, NCCL or out-of-memory line; None when there is none."""
    lines = [_RANK_PREFIX.sub("", line.rstrip()) for line in text.splitlines()]
    found = None
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace() and not line.startswith(("During handling", "The above")):
            if _EXCEPTION_LINE.match(line):
                found = line
            in_traceback = False
    if found is not None:
        return found[:400]
    for i in range(len(lines) - 1, -1, -1):
        if "what():" in lines[i] and i and lines[i - 1].startswith("terminate called"):
            continue  # the message of the C++ exception on the line before
        for pattern in _ERROR_LINES:
            if match := pattern.search(lines[i]):
                line = match[0]
                if line.startswith("terminate called") and i + 1 < len(lines) and "what():" in lines[i + 1]:
                    thrown = line.removeprefix("terminate called after throwing an instance of ").strip("'")
                    line = f"{thrown}: {lines[i + 1].split('what():', 1)[1].strip()}"
                return line[:400]
    return None


def is_consequence(error: str) -> bool:
    """Whether an error follows from another rank's failure (a collective timed out or lost its peer)."""
    return bool(CONSEQUENCE.search(error))


def signal_text(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def launcher_exits(job_log: str, pids: dict[tuple[str, int], int]) -> tuple[dict[int, str], tuple[int | None, str] | None]:
    """What the launcher said of each rank that ended badly (`was killed by SIGKILL (signal 9)`,
    `exited with code 3`), and Hydra's word on the job (the rank of the PID it names, through `pids`
    ((host, pid) -> rank), and the signal it reports: seen to be another process's, a rank its
    cleanup killed)."""
    exits: dict[int, str] = {}

    def note(rank: int, text: str) -> None:
        exits.setdefault(rank, text)

    for match in re.finditer(r"srun: error: \S+: tasks? ([0-9,\-]+): (.+)", job_log):
        for part in match[1].split(","):
            low, _, high = part.partition("-")
            for rank in range(int(low), int(high or low) + 1):
                word = match[2].strip().removesuffix(" (core dumped)")
                exited = re.fullmatch(r"Exited with exit code (\d+)", word)
                number = SIGNAL_WORDS.get(word)
                note(rank, f"exited with code {exited[1]}" if exited else
                     f"was killed by {signal_text(number)}" if number else f"ended: {word}")
    for match in re.finditer(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)", job_log):
        note(int(match[1]), f"was killed by {signal_text(int(match[2]))}")
    for match in re.finditer(r"rank (\d+) died from signal (\d+)", job_log):
        note(int(match[1]), f"was killed by {signal_text(int(match[2]))}")
    for match in re.finditer(r"rank (\d+) exited with code (\d+)", job_log):
        note(int(match[1]), f"exited with code {match[2]}")
    for match in re.finditer(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", job_log):
        code = int(match[2])
        note(int(match[1]), f"was killed by {signal_text(-code)}" if code < 0 else f"exited with code {code}")
    hydra = re.search(r"PID (\d+) RUNNING AT (\S+)", job_log)
    why = re.search(r"EXIT STRING: (.+?) \(signal (\d+)\)", job_log)
    named = pids.get((hydra[2], int(hydra[1]))) if hydra else None
    return exits, (named, f"was killed by {signal_text(int(why[2]))}") if why else None


@dataclass
class RankFiles:
    """What one rank left."""

    rank: int
    process: dict[str, Any] = field(default_factory=dict)     # pid, host, started (the stacks file's first line)
    blocks: list[StackBlock] = field(default_factory=list)
    exception: dict[str, Any] | None = None                    # type, message, time, frames (innermost first)
    log_error: str | None = None
    exit: str | None = None                                    # what the launcher said
    exit_order: int = 0                                        # where it said it among the ranks it named

    @property
    def vanished(self) -> bool:
        """Its Python started and ended with no error, no stack and no cleanup (its stacks file kept only
        its first line, which a clean exit removes): killed by a signal it could not catch, e.g. SIGKILL."""
        return bool(self.process) and not self.blocks and not self.exception and not self.log_error and not self.exit

    @property
    def fatal(self) -> StackBlock | None:
        return next((b for b in self.blocks if b.kind == "fatal"), None)

    @property
    def stack(self) -> StackBlock | None:
        """The last dump of its stacks the job asked for (the state at the incident, as its last
        Flight Recorder dump), else any block with frames."""
        return next((b for b in reversed(self.blocks) if b.kind == "dump" and b.frames), None) \
            or next((b for b in self.blocks if b.frames), None)

    def error(self) -> str | None:
        """Its own error: the exception; the fatal signal (with the log's line, e.g. the C++ exception
        that aborted); the log's line; else the launcher's word."""
        if self.exception:
            return f"{self.exception['type']}: {self.exception['message']}".strip().removesuffix(":")
        if (fatal := self.fatal) is not None:
            named = FATAL_SIGNALS.get(fatal.reason)
            died = f"{named} ({fatal.reason})" if named else fatal.reason
            return f"died of {died}" + (f": {self.log_error}" if self.log_error else "")
        return self.log_error or self.exit


def _exception(path: Path, rank: int, job: Job, pid: int | None) -> dict[str, Any] | None:
    """Rank `rank`'s exception record, checked (checks.check_exception); None where there is none;
    RecordError where it is refused."""
    from hpcprof.core.safe_paths import read_regular

    try:
        data = json.loads(read_regular(path, 4 << 20))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise RecordError(f"not read ({type(exc).__name__}: {exc})"[:300]) from None
    record = check_exception(data, rank, job, pid)
    record["frames"] = [Frame(str(f[0]), int(f[1]), str(f[2])) for f in reversed(record["frames"])]
    return record


def _process(process: dict[str, Any], rank: int, job: Job) -> None:
    """A stacks file's process line, checked: its rank, its pid, its start inside the job's time."""
    if process.get("rank") != rank:
        raise RecordError(f"the process line of rank {process.get('rank')} in rank {rank}'s file")
    integer(process["pid"], "pid", 1, 1 << 31)
    job.check_time(process["started"], "started")


#: the forensics files named for a rank, and the name of rank R's
_RANK_FILES = {"stacks_rank": ".txt", "exception_rank": ".json"}


def read_ranks(run_dir: Path, world_size: int,
               job: Job | None = None) -> tuple[dict[int, RankFiles], str | None, list[str]]:
    """Every rank's files (a rank's log is searched only when it left no exception record), what
    Hydra said of a process it did not tie to a rank (`was killed by SIGKILL (signal 9)`), and a
    line per record refused (checks: another rank's, another job's, a rank outside the world, a
    name that is no rank's)."""
    job = job or Job(world_size)
    forensics, logs = run_dir / "forensics", run_dir / "logs"
    ranks = {rank: RankFiles(rank) for rank in range(world_size)}
    problems: list[str] = []
    try:
        names = set(os.listdir(forensics))
    except OSError:
        names = set()
    for name in sorted(names):
        for prefix, suffix in _RANK_FILES.items():
            if name.startswith(prefix) and name.endswith(suffix):
                found = rank_in_name(name, prefix, suffix)
                if found is None or found not in ranks:
                    why = (f"rank {found} is outside the world of {world_size} ranks" if found is not None else
                           "not named for a rank (ASCII digits, no leading zero)")
                    problems.append(f"{forensics / name}: refused ({why})")
    for rank, files in ranks.items():
        if f"stacks_rank{rank}.txt" in names:
            path = forensics / f"stacks_rank{rank}.txt"
            files.process, files.blocks = parse_stacks(read_text_tail(path, 1 << 20))
            try:
                if files.process:
                    _process(files.process, rank, job)
            except RecordError as exc:
                problems.append(f"{path}: refused ({exc})")
                files.process, files.blocks = {}, []
        if f"exception_rank{rank}.json" in names:
            path = forensics / f"exception_rank{rank}.json"
            try:
                files.exception = _exception(path, rank, job, files.process.get("pid"))
            except RecordError as exc:
                problems.append(f"{path}: refused ({exc})")
        if files.exception is None:
            files.log_error = error_line(read_text_tail(logs / f"rank{rank}.log"))
            if files.log_error and files.log_error.startswith("Fatal Python error") and files.fatal is not None:
                files.log_error = None  # faulthandler's own line, already in the stacks file
    pids = {(f.process["host"], f.process["pid"]): rank for rank, f in ranks.items() if f.process}
    exits, hydra = launcher_exits(read_text_tail(logs / "job.out"), pids)
    for order, (rank, text) in enumerate(exits.items()):
        if rank in ranks:
            ranks[rank].exit, ranks[rank].exit_order = text, order
    if len(problems) > 3:
        problems = [f"{len(problems):,} forensics records refused; the first: {problems[0]}"]
    vanished = [rank for rank, f in ranks.items() if f.vanished]
    if hydra is not None and len(vanished) == 1:  # the one rank that died without a word (Hydra's PID is any)
        ranks[vanished[0]].exit = hydra[1]
        return ranks, None, problems
    return ranks, hydra[1] if hydra is not None else None, problems


#: a line of the job log that says something failed (where no rank started: the launcher's or the job script's)
_JOB_ERROR = re.compile(r"error|unknown|unrecogni[sz]ed|invalid|not found|no such|cannot|can't|failed|denied|"
                        r"refused|abort|usage|unable", re.I)
#: a C source position in a launcher's message: Hydra's `match_arg (/mpich-5.0.2/src/.../args.c:166)`
_C_SOURCE = re.compile(r"\s*\([^()\s]*\.[ch]:\d+\)")


def launch_failure(run_dir: Path) -> str | None:
    """Where no rank started (no rank left a log: each rank's wrapper opens its log first), what the
    job log says: its first line that says something failed (the launcher refusing its options, a
    missing program), else its last line; None where a rank started or the log says nothing."""
    logs = run_dir / "logs"
    try:
        if any(name.startswith("rank") and name.endswith(".log") for name in os.listdir(logs)):
            return None
    except OSError:
        pass
    lines = [line.strip() for line in read_text_tail(logs / "job.out").splitlines()]
    said = [line for line in lines if line and not line.startswith("hpcprof:")]   # not the job's own notes
    line = next((x for x in said if _JOB_ERROR.search(x)), said[-1] if said else None)
    return _C_SOURCE.sub("", line)[:400] if line else None


def rank_error(run_dir: Path, rank: int) -> str | None:
    """Rank `rank`'s own error (its exception record, else its log's error line), or None."""
    try:
        record = _exception(run_dir / "forensics" / f"exception_rank{rank}.json", rank, Job(), None)
    except RecordError:
        record = None
    if record is not None:
        return f"{record['type']}: {record['message']}".strip().removesuffix(":")
    return error_line(read_text_tail(run_dir / "logs" / f"rank{rank}.log"))
