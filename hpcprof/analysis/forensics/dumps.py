"""PyTorch's Flight Recorder dumps (`<run>/forensics/fr_rank<N>`: the buffer Gloo records into;
`fr_nccl_rank<N>`: NCCL's, written by the start-up hook or NCCL's watchdog): read without running
code from them, and matched across ranks.

A dump is the pickle `torch._C._distributed_c10d._dump_fr_trace` returns: `version`, `pg_config`
(process group name -> desc and global ranks), `entries` (one per collective a rank entered:
`process_group` (name, desc), `collective_seq_id`, `profiling_name` such as `gloo:all_reduce`,
`input_sizes`, `state`, `retired`, `time_created_ns`, ...) and, from the start-up hook, `hpcprof`
(rank, time of the dump, reason). Gloo keeps `state` at `scheduled` and sets `retired` when the
work ends, also when it failed: "completed" below is "retired" for Gloo.

Matching (per process group, point-to-point entries left out): from the first sequence number
every rank still holds (the buffer is a ring), the first collective whose ranks disagree on the
operation or the input sizes (`mismatch`), or that some ranks with a dump never entered
(`missing`). PyTorch's `fr_trace` analyser (torch.distributed.flight_recorder) decides which
collective that is where it imports and accepts the dumps; this module's reader otherwise. Either
way the details (who passed what, who waited how long) come from this reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcprof.analysis.forensics.checks import (
    MAX_ENTRIES,
    MAX_GROUPS,
    Job,
    RecordError,
    check_entry,
    check_note,
    check_plain,
    group_ranks,
    text,
)
from hpcprof.core import safe_pickle
from hpcprof.core.safe_paths import open_regular
from hpcprof.run.ranks import rank_in_name

#: the dumps' families, `<family>_rank<N>`: fr (Gloo and any backend recording into the generic buffer), fr_nccl (NCCL)
FAMILIES = ("fr", "fr_nccl")
#: a dump larger than this is not read (2,000 entries with stack traces are a few MB)
MAX_DUMP_BYTES = 256 << 20


class DumpError(ValueError):
    """A dump that cannot be read: damaged, too large, or naming code to run."""


def load_dump(path: Path) -> dict[str, Any]:
    """One dump, as a dict; DumpError when it cannot be read."""
    try:
        with open_regular(path) as fh:     # a FIFO or a device is refused, never waited on
            if os.fstat(fh.fileno()).st_size > MAX_DUMP_BYTES:
                raise DumpError(f"{path}: larger than {MAX_DUMP_BYTES >> 20} MiB, not read")
            data = safe_pickle.load(fh, max_bytes=MAX_DUMP_BYTES)  # plain data only: a run directory may be someone else's
    except (OSError, ValueError) as exc:
        raise DumpError(f"{path}: not a Flight Recorder dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise DumpError(f"{path}: not a Flight Recorder dump (no entries)")
    return data


@dataclass
class Dump:
    """One rank's dump of one buffer, every field the reader uses checked (hpcprof.analysis.forensics.checks)."""

    family: str
    rank: int
    path: Path
    version: str
    time_ns: int                      # when it was dumped (the hook's note, else the file's mtime)
    reason: str
    pg_config: dict[str, Any]
    entries: list[dict[str, Any]]
    members: dict[str, tuple[str, list[int]]] = field(default_factory=dict)   # group -> (desc, global ranks)

    @classmethod
    def read(cls, path: Path, job: Job | None = None, pid: int | None = None) -> Dump:
        """The dump at `path`, checked against `job` and the pid of its rank's process (None: unknown);
        DumpError naming the field that fails."""
        job = job or Job()
        family, rank = dump_name(path.name) or ("", None)
        if rank is None:
            raise DumpError(f"{path}: not named <family>_rank<N>")
        data = load_dump(path)
        try:
            job.check_rank(rank, "its name")
            check_plain(data)
            note = check_note(data.get("hpcprof"), rank, job, pid)
            if len(data["entries"]) > MAX_ENTRIES:
                raise RecordError(f"{len(data['entries']):,} entries, more than {MAX_ENTRIES:,}")
            entries = [check_entry(e, i) for i, e in enumerate(data["entries"])]
            config: dict[str, Any] = data["pg_config"] if isinstance(data.get("pg_config"), dict) else {}
            if len(config) > MAX_GROUPS:
                raise RecordError(f"pg_config holds {len(config):,} groups, more than {MAX_GROUPS:,}")
            members = {str(name): (str(conf.get("desc", "")), ranks) for name, conf in config.items()
                       if (ranks := group_ranks(conf, str(name), job))}
            version = text(str(data.get("version", "")), "version", 32)
        except RecordError as exc:
            raise DumpError(f"{path}: refused ({exc})") from None
        try:
            time_ns = int(note.get("time_ns") or path.stat().st_mtime_ns)
        except OSError:
            time_ns = 0
        return cls(family, rank, path, version, time_ns, str(note.get("reason") or "dumped by PyTorch"), config,
                   entries, members)


def dump_name(name: str) -> tuple[str, int] | None:
    """(family, rank) of a dump's file name (the rank in ASCII digits, no leading zero), None for any other file."""
    family, sep, tail = name.rpartition("_rank")
    rank = rank_in_name(tail, "") if sep and family in FAMILIES else None
    return None if rank is None else (family, rank)


#: the most unreadable dumps named one line each; beyond, one line says how many
NAMED_PROBLEMS = 3


def read_dumps(directory: Path, job: Job | None = None,
               pids: dict[int, int] | None = None) -> tuple[dict[str, dict[int, Dump]], list[str]]:
    """Every dump in `directory` by family and rank, checked against `job` and the ranks' `pids`, and
    the lines on those that could not be read or were refused (up to NAMED_PROBLEMS one each, else
    one line for all)."""
    found: dict[str, dict[int, Dump]] = {}
    problems = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}, []
    for name in names:
        if name.startswith(tuple(f"{family}_rank" for family in FAMILIES)) and not name.endswith(".tmp"):
            try:
                named = dump_name(name)
                if named is None:
                    raise DumpError(f"{directory / name}: refused (not named <family>_rank<N>: N in ASCII "
                                    "digits, no leading zero)")
                dump = Dump.read(directory / name, job, (pids or {}).get(named[1]))
            except DumpError as exc:
                problems.append(str(exc))
                continue
            found.setdefault(dump.family, {})[dump.rank] = dump
    if len(problems) > NAMED_PROBLEMS:
        problems = [f"{len(problems):,} dumps in {directory} not read or refused; the first: {problems[0]}"]
    return found, problems


def op_name(entry: dict[str, Any]) -> str:
    """`gloo:all_reduce` -> `all_reduce`."""
    return str(entry.get("profiling_name", "?")).partition(":")[2] or str(entry.get("profiling_name", "?"))


def sizes_text(sizes: Any) -> str:
    """`[[4], [2, 3]]` -> `[4], [2, 3]`."""
    if isinstance(sizes, (list, tuple)) and all(isinstance(s, (list, tuple)) for s in sizes):
        return ", ".join(f"[{', '.join(str(d) for d in s)}]" for s in sizes) or "[]"
    return str(sizes)


def signature(entry: dict[str, Any]) -> str:
    """What must agree across ranks: the operation and its input sizes."""
    return f"{op_name(entry)} {sizes_text(entry.get('input_sizes'))}"


def completed(entry: dict[str, Any]) -> bool:
    return bool(entry.get("retired")) or entry.get("state") == "completed"


@dataclass
class Group:
    """One process group as the dumps of one family see it."""

    name: str
    desc: str
    members: list[int]                              # global ranks (from pg_config, else those seen)
    by_rank: dict[int, dict[int, dict[str, Any]]]   # dumped rank -> seq -> entry
    dumped_at: dict[int, int]                       # dumped rank -> time of its dump (ns)

    @property
    def no_dump(self) -> list[int]:
        return [r for r in self.members if r not in self.by_rank]

    def entered(self, rank: int) -> int:
        return max(self.by_rank.get(rank) or [0])

    def completed(self, rank: int) -> int:
        return max([seq for seq, e in (self.by_rank.get(rank) or {}).items() if completed(e)] or [0])

    def start(self) -> int:
        """The first sequence number every rank with entries still holds (the buffer is a ring)."""
        return max([min(seqs) for seqs in self.by_rank.values() if seqs] or [0])


@dataclass
class Finding:
    """The first collective of a group that went wrong."""

    family: str
    group: str
    desc: str
    members: list[int]
    seq: int
    op: str
    kind: str                                       # missing | mismatch
    present: list[int]                              # ranks that entered it
    missing: list[int]                              # ranks with a dump that never entered it
    no_dump: list[int]                              # members that left no dump
    signatures: dict[int, str] = field(default_factory=dict)  # rank -> `op [sizes]` (all present ranks)
    waited_s: float | None = None                   # the longest a present rank had waited in it at its dump
    created_ns: int = 0                             # when the first rank entered it


def groups_of(dumps: dict[int, Dump], family: str) -> dict[str, Group]:
    """The process groups named in the dumps of one family."""
    groups: dict[str, Group] = {}
    configured: dict[str, tuple[str, list[int]]] = {}
    for dump in dumps.values():
        for name, conf in dump.members.items():
            configured.setdefault(name, conf)
    for rank, dump in sorted(dumps.items()):
        for entry in dump.entries:
            if entry.get("is_p2p"):
                continue
            name, desc = str(entry["process_group"][0]), str(entry["process_group"][1])
            group = groups.setdefault(name, Group(name, desc, [], {}, {}))
            group.by_rank.setdefault(rank, {})[entry["collective_seq_id"]] = entry
            group.dumped_at[rank] = dump.time_ns
    for name, group in groups.items():
        desc, ranks = configured.get(name, (group.desc, []))
        members: list[int] = ranks
        group.members = sorted(set(members) | set(group.by_rank)) if members else sorted(group.by_rank)
        for rank in group.members:  # a dumped rank that never entered this group's collectives
            if rank in dumps and rank not in group.by_rank:
                group.by_rank[rank] = {}
                group.dumped_at[rank] = dumps[rank].time_ns
    return groups


def finding_at(family: str, group: Group, seq: int, kind: str | None = None) -> Finding | None:
    """What went wrong at `seq` of `group` (`kind` given: as another analyser decided), or None."""
    present = [r for r, seqs in sorted(group.by_rank.items()) if seq in seqs]
    if not present:
        return None
    missing = [r for r in sorted(group.by_rank) if seq not in group.by_rank[r]]
    entries = {r: group.by_rank[r][seq] for r in present}
    signatures = {r: signature(e) for r, e in entries.items()}
    agree = len(set(signatures.values())) == 1
    if kind is None or (kind == "mismatch" and agree):  # fr_trace also calls ranks in different states a mismatch
        kind = "missing" if agree and missing else None if agree else "mismatch"
        if kind is None:
            return None
    first = min(entries.values(), key=lambda e: int(e.get("time_created_ns") or 0))
    waited = [(group.dumped_at[r] - int(e.get("time_created_ns") or 0)) / 1e9 for r, e in entries.items()
              if e.get("time_created_ns")]
    return Finding(family, group.name, group.desc, group.members, seq, op_name(first), kind, present, missing,
                   group.no_dump, signatures, max(waited) if waited else None, int(first.get("time_created_ns") or 0))


def own_findings(family: str, groups: dict[str, Group]) -> list[Finding]:
    """hpcprof's reader: the first collective of each group that did not match or that a rank
    with a dump never entered."""
    found = []
    for group in groups.values():
        start = max(group.start(), 1)
        for seq in sorted({seq for seqs in group.by_rank.values() for seq in seqs if seq >= start}):
            if (finding := finding_at(family, group, seq)) is not None:
                found.append(finding)
                break
    return found


def torch_findings(family: str, dumps: dict[int, Dump], groups: dict[str, Group]) -> list[Finding] | None:
    """PyTorch's `fr_trace` analyser (build_db) over the same dumps: the first collective of each
    group it reports as not fully matched, with missing ranks or mismatches; None where it does
    not import or refuses the dumps."""
    import argparse
    import copy
    import logging

    logger = logging.getLogger("Flight Recorder")  # fr_trace's own logger prints every finding
    disabled, logger.disabled = logger.disabled, True
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
    except ImportError:
        logger.disabled = disabled
        return None
    args = argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True, mismatch_cap=10,
                              selected_ranks=None, pg_filters=None, print_stack_trace=False, transform_ft=False)
    details = {dump.path.name: {"host_name": f"host_rank{rank}", "rank": rank, "version": dump.version,
                                "entries": copy.deepcopy(dump.entries), "pg_config": dump.pg_config}
               for rank, dump in sorted(dumps.items())}
    try:
        db = build_db(details, args, next(iter(dumps.values())).version)
    except Exception:  # an analyser that refuses these dumps: hpcprof's reader answers
        return None
    finally:
        logger.disabled = disabled
    found: dict[str, Finding] = {}
    for collective in db.collectives:
        name = str(collective.group_id)
        if name in found or name not in groups or not (
                collective.missing_ranks or collective.mismatch_collectives or not collective.pass_check):
            continue
        kind = "mismatch" if collective.mismatch_collectives else "missing"
        finding = finding_at(family, groups[name], int(collective.collective_seq_id), kind)
        if finding is not None:
            if collective.missing_ranks:
                finding.missing = sorted(int(r) for r in collective.missing_ranks)
            found[name] = finding
    return list(found.values())


@dataclass
class FlightRecord:
    """Every family's groups and findings, and which analyser decided."""

    groups: dict[str, dict[str, Group]]             # family -> name -> group
    findings: list[Finding]                         # earliest first
    engine: str                                     # "PyTorch fr_trace", "hpcprof" or "" (no dumps)
    problems: list[str]
    dumped: dict[int, list[str]]                    # rank -> its dump files


def analyse_dumps(directory: Path, use_torch: bool = True, job: Job | None = None,
                  pids: dict[int, int] | None = None) -> FlightRecord:
    """Read the dumps of `directory` (checked against `job` and the ranks' `pids`, read_dumps) and find,
    per family and group, the first collective that went wrong."""
    families, problems = read_dumps(directory, job, pids)
    groups: dict[str, dict[str, Group]] = {}
    findings: list[Finding] = []
    engines = set()
    dumped: dict[int, list[str]] = {}
    for family, dumps in sorted(families.items()):
        for rank, dump in dumps.items():
            dumped.setdefault(rank, []).append(dump.path.name)
        groups[family] = groups_of(dumps, family)
        decided = torch_findings(family, dumps, groups[family]) if use_torch else None
        engines.add("hpcprof" if decided is None else "PyTorch fr_trace")
        findings += own_findings(family, groups[family]) if decided is None else decided
    findings.sort(key=lambda f: (f.created_ns or 1 << 62, f.family, f.group))
    return FlightRecord(groups, findings, " and ".join(sorted(engines)), problems, dumped)
