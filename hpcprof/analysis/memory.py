"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, by hpcprof or by the user), read
as plain data (hpcprof.core.safe_pickle: a snapshot is a pickle; one naming code is refused), per device:

- the allocated bytes over the recorded history (`device_traces`): each `alloc` adds its size,
  each `free_completed` takes it away, as PyTorch's own reading of the trace does
  (torch.cuda._memory_viz.trace); the level where the history begins is the end state (the
  segments' blocks still allocated, `active_allocated` or `active_pending_free`) less what the
  history changed, so a history whose ring buffer dropped its first entries still starts right.
  Bytes are the sizes asked for, as the history records them and as torch.cuda._memory_viz
  credits a block's stack (its `requested_size`); torch.cuda.max_memory_allocated counts blocks
  rounded up to 512 bytes, so it is higher by that rounding of the small blocks then held;
- the peak of that level and what held it, by site: the innermost frame of the program's own code
  (not Python's, not an installed package's) of each allocation's stack, `file:line function`;
  bytes allocated before the history began are one `(before the history)` holder;
- what held the peak by kind, from each allocation's whole stack (KINDS): parameters (a module
  built or moved to the device), optimizer state (torch.optim creating it), the optimizer's step
  (its temporaries), the forward (a module's forward: activations), the backward (no Python frame:
  the autograd engine's thread, gradients and their temporaries), the program's own (the rest);
- growth: by site, the allocations made during the history and still held at its end (a leak
  allocates and never frees: blocks from one site that keep growing);
- reserved bytes at the end (the segments' sizes) and any out-of-memory event the history holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprof.core.errors import UserError
from hpcprof.core.safe_paths import open_regular

if TYPE_CHECKING:
    import pandas as pd

#: a snapshot larger than this is not read (a snapshot of max_entries 1,000,000 with C++ stacks is ~1 GB)
MAX_SNAPSHOT_BYTES = 4 << 30
#: the most objects (nodes as a tree) a snapshot may hold: memory stays bounded (~100 bytes each)
MAX_SNAPSHOT_NODES = 30_000_000
#: a frame of Python itself, of an installed package or of PyTorch's own code: never a site
LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d[\d.]*/|^<|^\?\?$|^$|/torch/|\.(?:cpp|cc|h|c)$")
BEFORE = "(before the history)"
UNKNOWN = "(no Python frame)"
#: what an allocation is, from its stack: (kind, test on one frame's path and function), the first that
#: any frame of the stack passes wins; an allocation with no Python frame at all is BACKWARD
KINDS: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    ("parameters", re.compile(r"/torch/nn/(modules/module|parameter)\.py$"), re.compile(r"^(_apply|to|cuda|__new__)$")),
    ("optimizer state", re.compile(r"/torch/optim/"), re.compile(r"^_init_group$")),
    ("optimizer step", re.compile(r"/torch/optim/"), re.compile(r"")),
    ("forward", re.compile(r"/torch/nn/modules/"), re.compile(r"^forward$")),
)
BACKWARD = "backward (no Python frame)"
PROGRAM = "the program's own"
#: the trace's actions that change the allocated bytes
ALLOC, FREE = "alloc", "free_completed"
#: the most points a timeline keeps (the peak always among them)
TIMELINE_POINTS = 4000


class SnapshotError(UserError):
    """A snapshot that cannot be read: damaged, too large, not plain data, not a snapshot."""


def site(frames: Any) -> str:
    """`train.py:18 forward`: the innermost frame of the program's own code, else the innermost
    Python frame, else UNKNOWN (frames innermost first, as PyTorch records them)."""
    if not isinstance(frames, list):
        return UNKNOWN
    valid = [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    own = next((f for f in valid if not LIBRARY.search(f["filename"])), None)
    chosen = own or next((f for f in valid if f["filename"].endswith(".py")), None)
    if chosen is None:
        return UNKNOWN
    return f"{Path(chosen['filename']).name}:{chosen.get('line', '?')} {chosen.get('name', '?')}"


def _python(frames: Any) -> list[dict[str, Any]]:
    """The Python frames of a recorded stack."""
    return [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)
            and f["filename"].endswith(".py")] if isinstance(frames, list) else []


def kind(frames: Any) -> str:
    """What an allocation is, by its stack (KINDS); BACKWARD without any Python frame, else PROGRAM.
    Meaningful only where the history recorded Python stacks (`device_memory` tells none otherwise)."""
    python = _python(frames)
    if not python:
        return BACKWARD
    for name, path, function in KINDS:
        if any(path.search(f["filename"].replace("\\", "/")) and function.search(str(f.get("name", ""))) for f in python):
            return name
    return PROGRAM


@dataclass
class Holder:
    """Bytes held by one site."""

    site: str
    bytes: int = 0
    blocks: int = 0


@dataclass
class DeviceMemory:
    """One device's memory over the snapshot's history."""

    device: int
    events: int                                   # alloc and free_completed events in the history
    start: int                                    # allocated bytes where the history begins
    end: int                                      # allocated bytes at the snapshot
    reserved: int                                 # the segments' bytes at the snapshot
    peak: int
    peak_time_us: int | None
    peak_event: int                               # index into the device's trace (-1: the start)
    at_peak: list[Holder]                         # by bytes, largest first
    kinds_at_peak: list[Holder]                   # the same bytes by kind (Holder.site: the kind)
    growing: list[Holder]                         # allocated during the history, still held at its end
    at_end: list[Holder]                          # the blocks allocated at the snapshot, by site
    timeline: list[tuple[int, int]] = field(default_factory=list)   # (time_us, allocated bytes)
    ooms: list[str] = field(default_factory=list)


def read_snapshot(path: Path, max_bytes: int = MAX_SNAPSHOT_BYTES, max_nodes: int = MAX_SNAPSHOT_NODES) -> dict[str, Any]:
    """The snapshot at `path` as plain data; SnapshotError (one line naming the file) otherwise."""
    from hpcprof.core import safe_pickle

    try:
        with open_regular(path) as fh:
            data = safe_pickle.load(fh, max_bytes=max_bytes, max_nodes=max_nodes)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SnapshotError(f"{path}: not read as a PyTorch memory snapshot ({reason})") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise SnapshotError(f"{path}: not a PyTorch memory snapshot (no `segments` list: "
                            "make one with torch.cuda.memory._dump_snapshot)")
    return data


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _blocks(snapshot: dict[str, Any], device: int) -> list[dict[str, Any]]:
    """The allocated blocks of `device` at the snapshot (sizes checked)."""
    found = []
    for segment in snapshot["segments"]:
        if not isinstance(segment, dict) or _int(segment.get("device")) != device:
            continue
        for block in segment.get("blocks") or []:
            if isinstance(block, dict) and block.get("state") in ("active_allocated", "active_pending_free") \
                    and _int(block.get("size")) is not None:
                found.append(block)
    return found


def _devices(snapshot: dict[str, Any]) -> list[int]:
    traces: list[Any] = snapshot["device_traces"] if isinstance(snapshot.get("device_traces"), list) else []
    with_blocks = {d for s in snapshot["segments"] if isinstance(s, dict) and (d := _int(s.get("device"))) is not None}
    return sorted(with_blocks | {i for i, trace in enumerate(traces) if trace})


def _trace(snapshot: dict[str, Any], device: int) -> list[dict[str, Any]]:
    """The device's alloc and free_completed events (size and address checked), and its OOMs."""
    traces = snapshot.get("device_traces")
    if not isinstance(traces, list) or device >= len(traces) or not isinstance(traces[device], list):
        return []
    return [e for e in traces[device] if isinstance(e, dict) and (
        (e.get("action") in (ALLOC, FREE) and _int(e.get("size")) is not None and _int(e.get("addr")) is not None)
        or e.get("action") == "oom")]


def _top(held: dict[str, Holder], before: int = 0) -> list[Holder]:
    out = [h for h in held.values() if h.bytes > 0]
    if before > 0:
        out.append(Holder(BEFORE, before))
    return sorted(out, key=lambda h: (-h.bytes, h.site))


def device_memory(snapshot: dict[str, Any], device: int) -> DeviceMemory:
    """One device's allocated bytes over the history, its peak, who held it, what grew."""
    events = _trace(snapshot, device)
    changes = [e for e in events if e["action"] != "oom"]
    end = sum(_asked(b) for b in _blocks(snapshot, device))
    start = end - sum(int(e["size"]) if e["action"] == ALLOC else -int(e["size"]) for e in changes)
    level, peak, peak_at, peak_time = start, start, -1, None
    timeline = []
    for index, event in enumerate(changes):
        level += int(event["size"]) if event["action"] == ALLOC else -int(event["size"])
        timeline.append((_int(event.get("time_us")) or 0, level))
        if level > peak:
            peak, peak_at, peak_time = level, index, _int(event.get("time_us"))
    live: dict[int, tuple[int, str, str]] = {}     # address -> (size, site, kind) of allocations of the history
    held: dict[str, Holder] = {}
    kinds: dict[str, Holder] = {}
    at_peak: list[Holder] = _top({}, start)
    kinds_at_peak: list[Holder] = _top({}, start)
    for index, event in enumerate(changes):
        if event["action"] == ALLOC:
            where, what = site(event.get("frames")), kind(event.get("frames"))
            live[int(event["addr"])] = (int(event["size"]), where, what)
            for key, table in ((where, held), (what, kinds)):
                holder = table.setdefault(key, Holder(key))
                holder.bytes, holder.blocks = holder.bytes + int(event["size"]), holder.blocks + 1
        elif (gone := live.pop(int(event["addr"]), None)) is not None:
            for key, table in ((gone[1], held), (gone[2], kinds)):
                holder = table[key]
                holder.bytes, holder.blocks = holder.bytes - gone[0], holder.blocks - 1
        if index == peak_at:
            before = peak - sum(size for size, _, _ in live.values())
            at_peak = _top({k: Holder(h.site, h.bytes, h.blocks) for k, h in held.items()}, before)
            kinds_at_peak = _top({k: Holder(h.site, h.bytes, h.blocks) for k, h in kinds.items()}, before)
    reserved = sum(int(s.get("total_size") or 0) for s in snapshot["segments"]
                   if isinstance(s, dict) and _int(s.get("device")) == device and _int(s.get("total_size")))
    ooms = [f"out of memory at {e.get('time_us', '?')} µs asking {e.get('size', '?')} bytes, "
            f"{e.get('device_free', '?')} free on the device" for e in events if e["action"] == "oom"]
    at_end = _top(_held_blocks(snapshot, device))
    if not changes:     # no history: the end state is all there is
        at_peak, kinds_at_peak = at_end, _top(_held_blocks(snapshot, device, kind))
    if not any(_python(e.get("frames")) for e in changes or _blocks(snapshot, device)):
        kinds_at_peak = []      # no Python stack recorded at all: the kinds cannot be told
    return DeviceMemory(device, len(changes), start, end, reserved, peak, peak_time, peak_at, at_peak, kinds_at_peak,
                        [h for h in _top(held) if h.blocks > 0], at_end, _thin(timeline, peak_at), ooms)


def _held_blocks(snapshot: dict[str, Any], device: int, key: Callable[[Any], str] = site) -> dict[str, Holder]:
    held: dict[str, Holder] = {}
    for block in _blocks(snapshot, device):
        where = key(block.get("frames"))
        holder = held.setdefault(where, Holder(where))
        holder.bytes, holder.blocks = holder.bytes + _asked(block), holder.blocks + 1
    return held


def _asked(block: dict[str, Any]) -> int:
    """A block's requested bytes (its size where the snapshot does not say)."""
    requested = _int(block.get("requested_size"))
    return requested if requested is not None and 0 < requested <= int(block["size"]) else int(block["size"])


def _thin(timeline: list[tuple[int, int]], keep: int) -> list[tuple[int, int]]:
    """At most TIMELINE_POINTS points: each stride's highest, and the peak's."""
    if len(timeline) <= TIMELINE_POINTS:
        return timeline
    stride = -(-len(timeline) // TIMELINE_POINTS)
    picked = {max(range(i, min(i + stride, len(timeline))), key=lambda j: timeline[j][1])
              for i in range(0, len(timeline), stride)}
    if keep >= 0:
        picked.add(keep)
    return [timeline[i] for i in sorted(picked)]


def analyse(snapshot: dict[str, Any]) -> list[DeviceMemory]:
    """Every device of the snapshot."""
    return [device_memory(snapshot, device) for device in _devices(snapshot)]


SITE_COLUMNS = ["rank", "device", "site", "bytes", "blocks"]
KIND_COLUMNS = ["rank", "device", "kind", "bytes", "blocks"]


def snapshot_tables(run_dir: Path) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """`profile.memory`'s snapshots (<run>/memory/rank<N>.pickle) as the tables keyed as catalog's
    STEPS_MEMORY_SITES (who held each rank's peak), STEPS_MEMORY_KINDS (the same bytes by kind) and
    STEPS_MEMORY_GROWTH (what the window allocated and still held at its end), by site; one line per
    snapshot that could not be read."""
    import pandas as pd

    from hpcprof.core import catalog as c

    peaks: list[dict[str, Any]] = []
    kinds: list[dict[str, Any]] = []
    grown: list[dict[str, Any]] = []
    problems = []
    for path in sorted((run_dir / "memory").glob("rank*.pickle")):
        rank = path.name.removeprefix("rank").removesuffix(".pickle")
        if not rank.isdigit():
            continue
        try:
            devices = analyse(read_snapshot(path))
        except SnapshotError as exc:
            problems.append(exc.format_message())
            continue
        for found in devices:
            peaks += [{"rank": int(rank), "device": found.device, "site": h.site, "bytes": h.bytes, "blocks": h.blocks}
                      for h in found.at_peak]
            kinds += [{"rank": int(rank), "device": found.device, "kind": h.site, "bytes": h.bytes, "blocks": h.blocks}
                      for h in found.kinds_at_peak]
            grown += [{"rank": int(rank), "device": found.device, "site": h.site, "bytes": h.bytes, "blocks": h.blocks}
                      for h in found.growing]
    tables = {key: pd.DataFrame(rows, columns=columns) for key, rows, columns in (
        (c.STEPS_MEMORY_SITES.key, peaks, SITE_COLUMNS), (c.STEPS_MEMORY_KINDS.key, kinds, KIND_COLUMNS),
        (c.STEPS_MEMORY_GROWTH.key, grown, SITE_COLUMNS)) if rows}
    return tables, problems
