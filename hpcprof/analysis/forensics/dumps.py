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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcprof import safe_pickle
from hpcprof.safe_paths import open_regular

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


def _ranks(text: Any) -> list[int]:
    """`pg_config`'s ranks, written as the text of a list: `[0, 1, 2]`."""
    return [int(r) for r in re.findall(r"-?\d+", str(text))]


@dataclass
class Dump:
    """One rank's dump of one buffer."""

    family: str
    rank: int
    path: Path
    version: str
    time_ns: int                      # when it was dumped (the hook's note, else the file's mtime)
    reason: str
    pg_config: dict[str, Any]
    entries: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path) -> Dump:
        family, rank = dump_name(path.name) or ("", None)
        if rank is None:
            raise DumpError(f"{path}: not named <family>_rank<N>")
        data = load_dump(path)
        note: dict[str, Any] = data["hpcprof"] if isinstance(data.get("hpcprof"), dict) else {}
        try:
            time_ns = int(note.get("time_ns") or path.stat().st_mtime_ns)
        except OSError:
            time_ns = 0
        entries = [e for e in data["entries"] if isinstance(e, dict) and isinstance(e.get("process_group"), (tuple, list))
                   and isinstance(e.get("collective_seq_id"), int)]
        config: dict[str, Any] = data["pg_config"] if isinstance(data.get("pg_config"), dict) else {}
        return cls(family, rank, path, str(data.get("version", "")), time_ns,
                   str(note.get("reason") or "dumped by PyTorch"), config, entries)


def dump_name(name: str) -> tuple[str, int] | None:
    """(family, rank) of a dump's file name, None for any other file."""
    family, sep, tail = name.rpartition("_rank")
    return (family, int(tail)) if sep and family in FAMILIES and tail.isdigit() else None


def read_dumps(directory: Path) -> tuple[dict[str, dict[int, Dump]], list[str]]:
    """Every dump in `directory` by family and rank, and one line per dump that could not be read."""
    found: dict[str, dict[int, Dump]] = {}
    problems = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}, []
    for name in names:
        if dump_name(name) is not None:
            try:
                dump = Dump.read(directory / name)
            except DumpError as exc:
                problems.append(str(exc))
                continue
            found.setdefault(dump.family, {})[dump.rank] = dump
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
        for name, conf in dump.pg_config.items():
            if isinstance(conf, dict) and _ranks(conf.get("ranks")) and str(name) not in configured:
                configured[str(name)] = (str(conf.get("desc", "")), _ranks(conf.get("ranks")))
    for rank, dump in sorted(dumps.items()):
        for entry in dump.entries:
            if entry.get("is_p2p"):
                continue
            name, desc = str(entry["process_group"][0]), str(entry["process_group"][1])
            group = groups.setdefault(name, Group(name, desc, [], {}, {}))
            group.by_rank.setdefault(rank, {})[entry["collective_seq_id"]] = entry
            group.dumped_at[rank] = dump.time_ns
    for name, group in groups.items():
        desc, members = configured.get(name, (group.desc, []))
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
        last = max([group.entered(r) for r in group.by_rank] or [0])
        for seq in range(max(group.start(), 1), last + 1):
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


def analyse_dumps(directory: Path, use_torch: bool = True) -> FlightRecord:
    """Read the dumps of `directory` and find, per family and group, the first collective that went wrong."""
    families, problems = read_dumps(directory)
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
