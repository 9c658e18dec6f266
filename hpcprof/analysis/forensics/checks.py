"""What the forensics files may hold: every field of a Flight Recorder dump, a stacks file's
process line and an exception record checked (type, range, the rank inside the world and the
one its file is named for, the job's own time and processes) before anything reads it. Any
process of the job can write these files, and a run directory may hold files copied from another
job: a record that fails a check is refused in one line naming the field, never half used.

The job (`Job`): its world size (0: unknown, any rank accepted) and the times its status file
gives (`start=`, `end=`); a record made more than SLACK_S before the job started or after it ended
is another job's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

#: how far a record's time may lie before the job's start or after its end (the nodes' clocks differ)
SLACK_S = 300.0
#: the most collectives a dump may hold (PyTorch keeps TORCH_FR_BUFFER_SIZE, 2,000 by default)
MAX_ENTRIES = 100_000
#: the most values (containers, scalars) one dump may hold in all, shared ones counted each time they are reached
MAX_NODES = 4_000_000
#: the deepest a dump's values may nest
MAX_DEPTH = 32
#: the most process groups a dump may configure
MAX_GROUPS = 10_000
#: the most frames an exception record may hold
MAX_FRAMES = 1_000
#: the longest text of a name (type, operation, group, host, reason)
MAX_NAME = 400
#: the largest sequence number, time (ns) or size accepted
MAX_INT = (1 << 63) - 1
#: a rank in a file's name: ASCII digits, no leading zero
_TYPE = re.compile(r"[A-Za-z_][\w.]{0,199}")
_SCALARS = (str, bytes, int, float, complex, type(None))      # bool is an int
_CONTAINERS = (list, tuple, dict, set, frozenset)


class RecordError(ValueError):
    """A record that fails a check: the message names the field."""


@dataclass(frozen=True)
class Job:
    """What the records must agree with: the world size (0: unknown) and the job's start and end (epoch seconds)."""

    world: int = 0
    start: float | None = None
    end: float | None = None

    @classmethod
    def of(cls, world: int, status: dict[str, str]) -> Job:
        """The job of a run: its world size and its status file's `start=` and `end=`."""
        def seconds(key: str) -> float | None:
            try:
                value = float(status.get(key, ""))
            except ValueError:
                return None
            return value if math.isfinite(value) and value > 0 else None
        return cls(max(world, 0), seconds("start"), seconds("end"))

    def check_rank(self, rank: int, what: str) -> None:
        if self.world and not 0 <= rank < self.world:
            raise RecordError(f"{what} names rank {rank}, outside the world of {self.world} ranks")

    def check_time(self, seconds: float, what: str) -> None:
        """`seconds` (epoch) inside the job's time, give or take SLACK_S."""
        if self.start is not None and seconds < self.start - SLACK_S:
            raise RecordError(f"{what} {seconds - self.start:+,.0f} s from the job's start: another job's record")
        if self.end is not None and seconds > self.end + SLACK_S:
            raise RecordError(f"{what} {seconds - self.end:+,.0f} s after the job's end: another job's record")


def integer(value: Any, what: str, low: int = 0, high: int = MAX_INT) -> int:
    """`value` if it is an int (not a bool) in low..high, else RecordError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RecordError(f"{what} is {_shown(value)}, not an integer in {low:,}..{high:,}")
    return value


def number(value: Any, what: str) -> float:
    """`value` if it is a finite, non-negative int or float (not a bool), else RecordError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RecordError(f"{what} is {_shown(value)}, not a finite number >= 0")
    return float(value)


def text(value: Any, what: str, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise RecordError(f"{what} is {_shown(value)}, not a text of at most {limit} characters")
    return value


def _shown(value: Any) -> str:
    if isinstance(value, (str, bytes)):
        return f"a text of {len(value):,} characters" if len(value) > 40 else repr(value)
    if isinstance(value, (list, tuple, dict, set)):
        return f"a {type(value).__name__} of {len(value):,} items"
    return repr(value)[:40] if isinstance(value, (int, float, bool)) or value is None else f"a {type(value).__name__}"


def check_plain(data: Any) -> None:
    """`data` holds only built-in containers and scalars, at most MAX_DEPTH deep and MAX_NODES values
    in all as a reader would reach them (a container shared by many counts each time: a small pickle
    of shared lists is no way round it). Walked without recursion, each distinct container once (its
    size and height kept), so a shared-list pickle costs its own size, not what it expands to."""
    if isinstance(data, _SCALARS):
        return
    sizes: dict[int, tuple[int, int]] = {}      # id -> (values it expands to, height)
    stack: list[tuple[Any, int, list[Any] | None]] = [(data, 1, None)]     # (value, depth, its containers once walked)
    while stack:
        value, depth, inner = stack.pop()
        if inner is None:
            if not isinstance(value, _CONTAINERS):
                raise RecordError(f"a value of type {type(value).__name__}")
            if id(value) in sizes:
                continue
            if depth > MAX_DEPTH:
                raise RecordError(f"values nested more than {MAX_DEPTH} deep")
            items: Any = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            inner = [item for item in items if not isinstance(item, _SCALARS)]
            stack.append((value, depth, inner))
            stack.extend([(item, depth + 1, None) for item in inner if id(item) not in sizes])
            continue
        below = [sizes[id(item)] for item in inner]
        size = 1 + len(value) * (2 if isinstance(value, dict) else 1) - len(inner) + sum(n for n, _ in below)
        height = 1 + max((h for _, h in below), default=0)
        if size > MAX_NODES:
            raise RecordError(f"more than {MAX_NODES:,} values (shared values counted each time they are reached)")
        if height > MAX_DEPTH:
            raise RecordError(f"values nested more than {MAX_DEPTH} deep")
        sizes[id(value)] = (size, height)


def check_entry(entry: Any, index: int) -> dict[str, Any]:
    """One collective of a dump, its fields that the reader uses checked."""
    where = f"entries[{index}]"
    if not isinstance(entry, dict):
        raise RecordError(f"{where} is {_shown(entry)}, not a mapping")
    group = entry.get("process_group")
    if not isinstance(group, (list, tuple)) or len(group) != 2 or not all(isinstance(g, (str, int)) for g in group):
        raise RecordError(f"{where}.process_group is {_shown(group)}, not (name, description)")
    text(str(group[0]), f"{where}.process_group name")
    text(str(group[1]), f"{where}.process_group description")
    integer(entry.get("collective_seq_id"), f"{where}.collective_seq_id")
    text(entry.get("profiling_name", ""), f"{where}.profiling_name")
    if "time_created_ns" in entry and entry["time_created_ns"] is not None:
        integer(entry["time_created_ns"], f"{where}.time_created_ns")
    sizes = entry.get("input_sizes", [])
    if not isinstance(sizes, (list, tuple)) or len(sizes) > 1024 or not all(
            isinstance(s, (list, tuple)) and len(s) <= 64 and all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_INT for d in s) for s in sizes):
        raise RecordError(f"{where}.input_sizes is {_shown(sizes)}, not a list of shapes (lists of sizes >= 0)")
    for flag in ("retired", "is_p2p"):
        if flag in entry and not isinstance(entry[flag], bool):
            raise RecordError(f"{where}.{flag} is {_shown(entry[flag])}, not true or false")
    if "state" in entry:
        text(entry["state"], f"{where}.state", 32)
    return entry


def group_ranks(conf: Any, name: str, job: Job) -> list[int]:
    """The global ranks of `pg_config[name]` (`ranks`: a list, or its text `[0, 1, 2]`), each inside the world."""
    where = f"pg_config[{name!r}]"
    if not isinstance(conf, dict):
        raise RecordError(f"{where} is {_shown(conf)}, not a mapping")
    raw = conf.get("ranks")
    limit = job.world or 1 << 20
    if isinstance(raw, str):
        if len(raw) > 12 * limit + 64:
            raise RecordError(f"{where}.ranks is {_shown(raw)}, more ranks than the world holds")
        found = re.findall(r"-?\d+", raw)
        if len(found) > limit:
            raise RecordError(f"{where}.ranks names {len(found):,} ranks, more than the world's {limit:,}")
        ranks = [integer(int(r) if r.isascii() else r, f"{where}.ranks", 0, (1 << 31) - 1) for r in found]
    elif isinstance(raw, (list, tuple)):
        if len(raw) > limit:
            raise RecordError(f"{where}.ranks names {len(raw):,} ranks, more than the world's {limit:,}")
        ranks = [integer(r, f"{where}.ranks", 0, (1 << 31) - 1) for r in raw]
    else:
        return []
    for rank in ranks:
        job.check_rank(rank, f"{where}.ranks")
    return ranks


def check_note(note: Any, rank: int, job: Job, pid: int | None) -> dict[str, Any]:
    """The start-up hook's note in a dump (`hpcprof`: rank, time_ns, reason, pid), checked against the
    file's rank, the job's time and the rank's process where known."""
    if note is None:
        return {}
    if not isinstance(note, dict):
        raise RecordError(f"hpcprof is {_shown(note)}, not a mapping")
    if "rank" in note and integer(note["rank"], "hpcprof.rank", 0, (1 << 31) - 1) != rank:
        raise RecordError(f"a dump of rank {note['rank']} in rank {rank}'s file")
    if note.get("time_ns") is not None:
        job.check_time(integer(note["time_ns"], "hpcprof.time_ns") / 1e9, "dumped")
    if note.get("pid") is not None and pid is not None and integer(note["pid"], "hpcprof.pid", 1, 1 << 31) != pid:
        raise RecordError(f"dumped by pid {note['pid']}, not rank {rank}'s process (pid {pid}): another job's or "
                          "another process's dump")
    if "reason" in note:
        text(note["reason"], "hpcprof.reason")
    return note


def check_exception(data: Any, rank: int, job: Job, pid: int | None) -> dict[str, Any]:
    """An exception record (`exception_rank<N>.json`: rank, pid, host, time, type, message, frames)
    checked against its file's rank, the job's time and the rank's process where known."""
    if not isinstance(data, dict):
        raise RecordError(f"is {_shown(data)}, not a mapping")
    if "rank" in data and integer(data["rank"], "rank", 0, (1 << 31) - 1) != rank:
        raise RecordError(f"a record of rank {data['rank']} in rank {rank}'s file")
    kind = text(data.get("type"), "type", 200)
    if not _TYPE.fullmatch(kind):
        raise RecordError(f"type is {kind[:40]!r}, not the name of an exception type")
    message = data.get("message") or ""
    text(message, "message", 1 << 20)
    time = number(data.get("time") or 0, "time")
    if time:
        job.check_time(time, "raised")
    found = data.get("pid")
    if found is not None and integer(found, "pid", 1, 1 << 31) != pid and pid is not None:
        raise RecordError(f"raised by pid {found}, not rank {rank}'s process (pid {pid}): another job's or "
                          "another process's record")
    host = text(data.get("host") or "", "host")
    frames = data.get("frames") or []
    if not isinstance(frames, list) or len(frames) > MAX_FRAMES:
        raise RecordError(f"frames is {_shown(frames)}, not a list of at most {MAX_FRAMES:,} frames")
    for i, frame in enumerate(frames):
        if not isinstance(frame, (list, tuple)) or len(frame) != 3:
            raise RecordError(f"frames[{i}] is {_shown(frame)}, not (file, line, function)")
        text(frame[0], f"frames[{i}] file", 4096)
        integer(frame[1], f"frames[{i}] line", 0, 1 << 31)
        text(frame[2], f"frames[{i}] function")
    return {"type": kind, "message": message.splitlines()[0][:1000] if message else "", "time": time,
            "frames": frames, "pid": found, "host": host}
