"""The answer for a run that hung or died: one sentence and a table of its ranks, from its Flight
Recorder dumps (hpcprof.analysis.forensics.dumps) and what each rank left (.ranks), cached in
`derived/forensics.json` while the files it came from are unchanged.

Which cause is named, first match wins: where no rank started, the job log's error (the launcher
refusing its options, a missing program); a collective whose ranks disagreed on the operation or
the sizes; else the first rank that failed on its own (its uncaught exception, earliest first;
Python's fatal error such as a segmentation fault; its log's error line; what its launcher said),
not one whose collective timed out or lost its peer (CONSEQUENCE); else the first collective some
ranks never entered (the ranks that did and how long they waited, the stack of those that did not);
else the first error of any rank. The sentence follows the run's state (TIMEOUT, FAILED), which
`status` and `report` show beside it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcprof.analysis.forensics.checks import Job
from hpcprof.analysis.forensics.dumps import Finding, FlightRecord, Group, analyse_dumps, op_name
from hpcprof.analysis.forensics.oom import holders_text, parse_oom
from hpcprof.analysis.forensics.ranks import (
    LIBRARY,
    Frame,
    RankFiles,
    is_consequence,
    launch_failure,
    read_ranks,
    where,
)
from hpcprof.core import catalog as c
from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import UserError, printable
from hpcprof.core.safe_paths import check_confined, read_regular
from hpcprof.run.rundir import RunDir
from hpcprof.schedulers.base import FAILED, RUNNING, TIMEOUT, JobState

#: the cache of `analyse` (derived/, collect's own files)
CACHE = "derived/forensics.json"
#: bumped when the analysis changes what it says: older caches are made again
CACHE_VERSION = 13
#: a C++ source position in a message: `[/__w/pytorch/.../unbound_buffer.cc:78] Timed out ...`, `[enforce fail at ...:456] `
_SOURCE = re.compile(r"\[(?:enforce fail at )?[^\]\s]*\.(?:cc|cpp|cu|h|hpp):\d+\]\s*")
#: the states a sentence explains
EXPLAINED = (FAILED, TIMEOUT)
#: what a run's damaged forensics may still raise past the checks: that run keeps its state, the others are shown
DAMAGED = (OSError, UserError, ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError,
           RecursionError, MemoryError)


def rank_list(ranks: list[int]) -> str:
    """`rank 2`, `ranks 0, 1, 3`, `ranks 0–2, 4–7`."""
    ranks = sorted(set(ranks))
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts += [f"{ranks[i]}–{ranks[j]}"] if j - i >= 2 else [str(r) for r in ranks[i:j + 1]]
        i = j + 1
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(parts)}"


def group_text(name: str, desc: str, members: list[int]) -> str:
    """`the default group`, `group 1 (ranks 0, 1)`, `group 2 "tp" (ranks 0–3)`."""
    if desc == "default_pg":
        return "the default group"
    label = f' "{desc}"' if desc and desc != "undefined" else ""
    return f"group {name}{label} ({rank_list(members)})"


def short_error(text: str) -> str:
    """An error without the C++ source positions PyTorch and Gloo put in it, first line, at most 240 characters."""
    text = _SOURCE.sub("", text.split("\n")[0].strip())
    return text if len(text) <= 240 else text[:239] + "…"


def seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s" if value >= 0.95 else f"{value * 1000:.0f} ms"


@dataclass
class RankRow:
    """One rank in the table `hpcprof logs RUN --hang` prints."""

    rank: int
    host: str = ""
    pid: int | None = None
    group: str = ""
    entered: str = ""           # the last collective it entered: `all_reduce #6`
    completed: int | None = None
    waiting_s: float | None = None
    error: str = ""
    where: str = ""
    dumps: str = ""             # its Flight Recorder dump files


@dataclass
class Analysis:
    """A run's forensics: the sentence (None when nothing was found), its ranks, the findings."""

    sentence: str | None
    ranks: list[RankRow]
    findings: list[dict[str, Any]]
    engine: str
    stack: list[str] = field(default_factory=list)   # the stack of the rank the sentence names
    problems: list[str] = field(default_factory=list)


class Evidence:
    """The run's files, joined: ranks, dumps, where the ranks started."""

    def __init__(self, run: RunDir, use_torch: bool = True) -> None:
        from hpcprof.run.record import read_record  # status imports this module: no msgspec until a run needs it

        try:
            record = read_record(run)
            submit_dir, self.world = record.submit_dir, record.world_size
        except UserError:   # a damaged config.json: the ranks the files name
            submit_dir, self.world = None, 0
        self.base = Path(submit_dir or run.path)
        self.directory = run.path / "forensics"
        status = run.job_status()
        job = Job.of(self.world, status)
        self.exit_code = status.get("exit_code", "")
        self.ranks: dict[int, RankFiles]
        self.ranks, self.unattributed, refused = read_ranks(run.path, self.world, job)
        pids = {rank: files.process["pid"] for rank, files in self.ranks.items() if files.process}
        self.flight: FlightRecord = analyse_dumps(run.path / "forensics", use_torch, job, pids)
        self.flight.problems[:0] = refused
        self.launch_failure = launch_failure(run.path)

    def _stacks(self, rank: int, incident: bool) -> list[tuple[str, list[Frame]]]:
        """Rank `rank`'s stacks, most recent call first, each with its heading: its exception's
        traceback and its last stack dump (`incident`: the dump first, the state when the others
        failed or the walltime neared); those holding a frame of the program's own code first."""
        files = self.ranks.get(rank)
        if files is None:
            return []
        found = []
        if files.exception and files.exception.get("frames"):
            found.append((f"rank {rank} raised {files.exception['type']}", files.exception["frames"]))
        if (block := files.stack) is not None:
            head = f"rank {rank}" + (f" at its {block.reason}" if block.kind == "fatal" else
                                     f" at the {block.reason}" if block.reason else "")
            found.insert(0 if incident and block.kind == "dump" else len(found), (head, block.frames))
        return sorted(found, key=lambda stack: not any(not LIBRARY.search(f.file) for f in stack[1]))

    def where(self, rank: int, incident: bool = False) -> str:
        """Where rank `rank` was: the innermost frame of the program's own code in its stack (see `_stacks`)."""
        stacks = self._stacks(rank, incident)
        frame = where(stacks[0][1]) if stacks else None
        return f"`{frame.text(self.base)}`" if frame else ""

    def stack(self, rank: int, incident: bool = False) -> list[str]:
        """Rank `rank`'s stack (see `_stacks`) under its heading, most recent call first."""
        stacks = self._stacks(rank, incident)
        if not stacks:
            return []
        head, frames = stacks[0]
        return [head + ", most recent call first:", *(f"  {f.text(self.base)}" for f in frames)]

    def error(self, rank: int) -> str:
        files = self.ranks.get(rank)
        error = files.error() if files else None
        return short_error(error) if error else ""

    def incident_group(self) -> tuple[str, Group] | None:
        """The group of the first finding, else the default group of the first family."""
        if self.flight.findings:
            first = self.flight.findings[0]
            return first.family, self.flight.groups[first.family][first.group]
        for family, groups in self.flight.groups.items():
            for group in groups.values():
                if group.desc == "default_pg" or group.name == "0":
                    return family, group
        return None


def _roots(ev: Evidence) -> list[tuple[int, str, str]]:
    """Ranks that failed on their own, first first: (rank, kind, error)."""
    found = []
    for rank, files in ev.ranks.items():
        if files.exception and not is_consequence(f"{files.exception['type']}: {files.exception['message']}"):
            found.append((0, files.exception["time"], rank, "raised", ev.error(rank)))
        elif files.fatal is not None and not is_consequence(ev.error(rank) or ""):   # not NCCL's watchdog abort
            found.append((1, 0.0, rank, "fatal", ev.error(rank)))
        elif files.log_error and not is_consequence(files.log_error):
            found.append((2, 0.0, rank, "log", ev.error(rank)))
        elif files.exit and not files.exception and files.stack is None:
            found.append((3, float(files.exit_order), rank, "exit", files.exit))  # in the launcher's order
    vanished = [rank for rank, files in ev.ranks.items() if files.vanished]
    if len(vanished) == 1:
        found.append((4, 0.0, vanished[0], "exit", vanished_text(ev.exit_code)))
    return [(rank, kind, error) for _, _, rank, kind, error in sorted(found)]


def vanished_text(exit_code: str) -> str:
    """What a rank that ended without a Python error or exit did, after the job's exit code: a code
    of 1-127 is the program's own (os._exit, a native exit), 128+N and a negative one a signal N."""
    from hpcprof.analysis.forensics.ranks import signal_text

    try:
        code = int(exit_code)
    except ValueError:
        code = 0
    if 0 < code < 128:
        return (f"ended without a Python error or exit (os._exit or a native exit; the job exited with code "
                f"{code})")
    if code > 128 or code < 0:
        return f"was killed by {signal_text(code - 128 if code > 128 else -code)} without a Python error"
    return "died without a Python error or exit (a signal it cannot catch, such as SIGKILL)"


def _missing_sentence(ev: Evidence, finding: Finding, state: str) -> tuple[str, int]:
    waited = f" waited {seconds(finding.waited_s)}" if finding.waited_s is not None else " waited"
    failed = [ev.error(r) for r in finding.present if ev.ranks.get(r) and ev.ranks[r].exception
              and is_consequence(ev.error(r))]
    after = "" if not failed or state == TIMEOUT else ", then timed out" if all(
        re.search(r"timed? ?out", e, re.I) for e in failed) else ", then failed"
    stuck = finding.missing[0]
    where = ev.where(stuck, incident=True)
    text = (f"{rank_list(finding.missing)} never entered {finding.op} #{finding.seq:,} of "
            f"{group_text(finding.group, finding.desc, finding.members)} ({rank_list(finding.present)}{waited}{after})")
    text += f"; rank {stuck} was in {where}" if where else f"; rank {stuck} left no stack"
    if (error := ev.error(stuck)) and not is_consequence(error):
        text += f" ({error})"
    return text, stuck


def _mismatch_sentence(ev: Evidence, finding: Finding) -> tuple[str, int]:
    by_signature: dict[str, list[int]] = {}
    for rank, sig in sorted(finding.signatures.items()):
        by_signature.setdefault(sig, []).append(rank)
    common, _ = Counter(finding.signatures.values()).most_common(1)[0]
    ops = {sig.partition(" ")[0] for sig in by_signature}
    verb = "called" if len(ops) > 1 else "passed"

    def shown(sig: str) -> str:
        return sig if len(ops) > 1 else sig.partition(" ")[2]

    odd = [(sig, ranks) for sig, ranks in by_signature.items() if sig != common]
    parts = "; ".join(f"{rank_list(ranks)} {verb} {shown(sig)}" for sig, ranks in odd)
    text = (f"{finding.op} #{finding.seq:,} of {group_text(finding.group, finding.desc, finding.members)} did not match "
            f"across ranks: {parts} where {rank_list(by_signature[common])} {verb} {shown(common)}")
    first = odd[0][1][0]
    if where := ev.where(first, incident=True):
        text += f"; rank {first} was in {where}"
    for rank, kind, error in _roots(ev)[:1]:  # what the mismatch did, e.g. a rank that aborted on it
        if rank != first:
            text += f"; rank {rank} {error if kind == 'fatal' else 'failed: ' + error}"
    return text, first


def _root_sentence(ev: Evidence, ranks: list[int], kind: str, error: str) -> str:
    """`ranks` failed first, each with the same `error` (`where` is the first one's)."""
    where = ev.where(ranks[0])
    at = f" in {where}" if where else ""
    who = rank_list(ranks)
    own = ev.ranks[ranks[0]].error() if kind in ("raised", "log") and ranks[0] in ev.ranks else None
    if own and (oom := parse_oom(own)):
        text = f"{who} ran out of CUDA memory" + (f" at {where}" if where else "") + f" ({oom.text()})"
        if held := holders_text(ev.directory / f"memory_rank{ranks[0]}.pickle", oom.device):
            text += f"; {held}"
    elif kind == "raised":
        text = f"{who} raised {error}{at}"
    elif kind == "fatal":
        text = f"{who} {error}{at}"
    elif kind == "exit":
        text = f"{who} {error} first" + (f"; it was in {where}" if where else "")
    else:
        text = f"{who} failed: {error}{at}"
    waiting = next((f for f in ev.flight.findings if f.kind == "missing" and f.missing == ranks), None)
    others = [r for r in ev.ranks if r not in ranks]
    if waiting is not None:
        text += (f"; {rank_list(waiting.present)} {'was' if len(waiting.present) == 1 else 'were'} waiting for it "
                 f"in {waiting.op} #{waiting.seq:,} of "
                 f"{group_text(waiting.group, waiting.desc, waiting.members)}")
    elif others and all(ev.error(r) and is_consequence(ev.error(r)) for r in others):
        stopped = [r for r in others if ev.ranks[r].error() == ev.ranks[r].exit]  # only the launcher's word
        failed = [r for r in others if r not in stopped]
        text += f"; the others' collectives then failed ({rank_list(failed)})" if failed else ""
        text += f"; the launcher then stopped {rank_list(stopped)}" if stopped else ""
    return text


def _sentence(ev: Evidence, state: str) -> tuple[str | None, int | None, bool]:
    """The sentence, the rank whose stack goes below it, and whether that is its stack at the incident."""
    findings = ev.flight.findings
    if ev.launch_failure:
        return f"no rank started; the job log says: {ev.launch_failure}", None, False
    if mismatch := next((f for f in findings if f.kind == "mismatch"), None):
        return (*_mismatch_sentence(ev, mismatch), True)
    if roots := _roots(ev):
        rank, kind, error = roots[0]
        same = [r for r, k, e in roots if (k, e) == (kind, error)]
        return _root_sentence(ev, same, kind, error), rank, False
    if missing := next((f for f in findings if f.kind == "missing" and f.missing), None):
        return (*_missing_sentence(ev, missing, state), True)
    failed = sorted((files.exception["time"] if files.exception else float("inf"), rank)
                    for rank, files in ev.ranks.items() if files.error())
    if failed:
        rank = failed[0][1]
        return f"rank {rank} failed first: {ev.error(rank)}" + (f" in {w}" if (w := ev.where(rank)) else ""), rank, False
    if ev.unattributed:
        vanished = [rank for rank, files in ev.ranks.items() if files.vanished]
        return (f"a rank {ev.unattributed} (mpiexec does not say which; "
                f"{rank_list(vanished) if vanished else 'no rank'} ended without a Python error)"), None, False
    return None, None, False


def _rows(ev: Evidence) -> list[RankRow]:
    incident = ev.incident_group()
    rows = []
    for rank, files in sorted(ev.ranks.items()):
        process = files.process or files.exception or {}
        row = RankRow(rank, str(process.get("host") or ""), process.get("pid"), error=ev.error(rank),
                      where=ev.where(rank, incident=True).strip("`"), dumps=", ".join(ev.flight.dumped.get(rank, [])))
        if incident is not None:
            _, group = incident
            row.group = group_text(group.name, group.desc, group.members)
            if rank in group.by_rank:
                entered = group.entered(rank)
                entry = group.by_rank[rank].get(entered)
                row.entered = f"{op_name(entry)} #{entered:,}" if entry else "none"
                row.completed = group.completed(rank)
                if entry is not None and not entry.get("retired") and entry.get("time_created_ns"):
                    row.waiting_s = round((group.dumped_at[rank] - int(entry["time_created_ns"])) / 1e9, 3)
        rows.append(row)
    return rows


def analyse(run: RunDir, state: str, use_torch: bool = True) -> Analysis:
    """The run's forensics (not cached: see `cached_analysis`)."""
    ev = Evidence(run, use_torch)
    sentence, named, incident = _sentence(ev, state)
    findings = [asdict(f) for f in ev.flight.findings]
    return Analysis(sentence, _rows(ev), findings, ev.flight.engine,
                    ev.stack(named, incident) if named is not None else [], ev.flight.problems)


def _fingerprint(run: RunDir, state: str) -> str:
    """What the analysis read: the forensics and log files' sizes and times, the job's status file."""
    import hashlib

    parts = [str(CACHE_VERSION), state]
    for sub in ("forensics", "logs"):
        try:
            with os.scandir(run.path / sub) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    info = entry.stat()
                    parts.append(f"{sub}/{entry.name}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:
            continue
    try:
        info = os.stat(run.path / "status")
        parts.append(f"status:{info.st_size}:{info.st_mtime_ns}")
    except OSError:
        pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cached_analysis(run: RunDir, state: str) -> Analysis:
    """`analyse`, kept in derived/forensics.json while the files it read are unchanged (a run
    directory that cannot be written is analysed every time)."""
    key = _fingerprint(run, state)
    path = run.path / CACHE
    try:
        data = json.loads(read_regular(path))
        if data.get("key") == key:
            found = data["analysis"]
            return Analysis(**{**found, "ranks": [RankRow(**row) for row in found["ranks"]]})
    except (OSError, ValueError, TypeError, KeyError):
        pass
    result = analyse(run, state)
    try:
        check_confined(run.path, "derived")    # a read command never writes through a link out of the run
        atomic_write(path, json.dumps({"key": key, "analysis": asdict(result)}))
    except (UserError, OSError):
        pass
    return result


def explained(run: RunDir, state: JobState) -> JobState:
    """`state` with the forensics' sentence as its reason, for a run that failed or ran out of
    time (a failed job-start check keeps its own)."""
    if state.state not in EXPLAINED or run.job_status().get("check"):
        return state
    try:
        sentence = cached_analysis(run, state.state).sentence
    except DAMAGED:
        return state
    return state._replace(reason=sentence + convention_fix(run, sentence)) if sentence else state


#: the error of a program that picks a GPU its rank does not see
ORDINAL = "invalid device ordinal"


def convention_fix(run: RunDir, sentence: str) -> str:
    """The fix a site convention calls for, added to the reason ('' for none): an invalid device
    ordinal where gpu_affinity left each rank one GPU names `gpu_affinity: local-rank`."""
    if ORDINAL not in sentence.lower():
        return ""
    from hpcprof.config.site import NARROWING_AFFINITIES, resolve_affinity
    from hpcprof.run.record import read_record

    try:
        record = read_record(run)
    except (OSError, UserError, ValueError):
        return ""
    affinity = resolve_affinity(record.experiment.gpu_affinity, record.site.gpu_affinity, record.site.launcher.kind)
    if affinity not in NARROWING_AFFINITIES:
        return ""
    return (f"; gpu_affinity {affinity} shows each rank only its own GPU (cuda:0), so a program that picks "
            "cuda:LOCAL_RANK asks rank 1 and up for a GPU they do not see: set gpu_affinity: local-rank in the "
            "experiment")


def stack_lines(run: RunDir, state: str) -> list[str]:
    """The stack of the rank the sentence names (shown below it), [] when there is none."""
    if state not in EXPLAINED:
        return []
    try:
        return cached_analysis(run, state).stack
    except DAMAGED:
        return []


#: the per-rank table's columns (`hpcprof logs RUN --hang`, collect's `forensics_ranks`)
RANK_COLUMNS = ["rank", "host", "pid", "entered", "completed", "waiting_s", "error", "where", "dumps"]


def request_dumps(run: RunDir) -> None:
    """Ask every rank of a running run for its stacks and Flight Recorder now (the start-up hook
    looks for the request every POLL_SECONDS), and give them the time to dump."""
    from hpcprof.config.forensics import POLL_SECONDS

    atomic_write(run.path / "forensics" / "dump.request", f"hpcprof logs --hang request\n{time.time():.3f}\n")
    time.sleep(2 * POLL_SECONDS + 1)


def hang_report(run: RunDir, fmt: str = "table") -> str:
    """What `hpcprof logs RUN --hang` prints: the state and sentence, the group, the table of the
    ranks (last collective entered and completed, how long it waited, error, where), the stack. A
    running run (armed) is asked for its dumps first: where its ranks are now."""
    import io

    from hpcprof.campaign.jobstate import current_state
    from hpcprof.core.output import emit_rows

    state = current_state(run)
    if state.state == RUNNING and (run.path / "inject").is_dir():
        request_dumps(run)
        found = analyse(run, state.state)
    else:
        found = cached_analysis(run, state.state)
    sentence = found.sentence if state.state in (*EXPLAINED, RUNNING) else None
    out = io.StringIO()
    rows = [asdict(row) for row in found.ranks]
    if fmt != "table":
        emit_rows(rows, ["group", *RANK_COLUMNS], fmt, out)
        return out.getvalue()
    out.write(printable(f"{state.state}: {sentence or state.reason or 'no forensics found'}") + "\n")
    groups = sorted({row.group for row in found.ranks if row.group})
    engine = f"; collectives matched by {found.engine}" if found.engine else ""
    out.write(f"collectives of {', '.join(groups) or 'no process group (no Flight Recorder dump)'}{engine}\n")
    emit_rows(rows, RANK_COLUMNS, "table", out)
    out.writelines(printable(line) + "\n" for line in found.stack)   # the records' text: no escape reaches the terminal
    out.writelines(printable(f"not read: {problem}") + "\n" for problem in found.problems)
    return out.getvalue()


def forensics_tables(run: RunDir) -> dict[str, Any]:
    """collect's tables of a run that failed or ran out of time: `ranks` (one row per rank) and
    `collectives` (the first collective of each group that went wrong); none for other runs."""
    import pandas as pd

    from hpcprof.campaign.jobstate import recorded_state

    state = recorded_state(run).state
    if state not in EXPLAINED:
        return {}
    found = cached_analysis(run, state)
    tables = {c.FORENSICS_RANKS.key: pd.DataFrame([asdict(r) for r in found.ranks], columns=["group", *RANK_COLUMNS])}
    if found.findings:
        tables[c.FORENSICS_COLLECTIVES.key] = pd.DataFrame([
            {"family": f["family"], "group": f["group"], "desc": f["desc"], "seq": f["seq"], "op": f["op"],
             "kind": f["kind"], "present": rank_list(f["present"]) if f["present"] else "",
             "missing": rank_list(f["missing"]) if f["missing"] else "",
             "no_dump": rank_list(f["no_dump"]) if f["no_dump"] else "", "waited_s": f["waited_s"],
             "signatures": "; ".join(f"{r}: {s}" for r, s in sorted(f["signatures"].items()))}
            for f in found.findings])
    return tables
