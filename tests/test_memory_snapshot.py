"""`hpcprof memory` (hpcprof.analysis.memory) on snapshots in PyTorch's format (segments with their
blocks and frames, device_traces with alloc / free_requested / free_completed), made here by a
small model of the caching allocator that knows the true allocated bytes at every event: the
peak against that truth (also where the history's ring buffer dropped its first entries), the
bytes per site against PyTorch's own reading of the same snapshot (torch.cuda._memory_viz.memory),
a planted leak, the HTML timeline, a damaged and a hostile file."""

from __future__ import annotations

import html
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hpcprof_cli import hpcprof

from hpcprof.analysis.memory import BEFORE, analyse, site

LIB = "/venv/lib/python3.11/site-packages/torch/nn/modules"
#: the program's sites, each under a library frame (innermost first, as PyTorch records stacks)
STACKS = {
    "model.py:18 forward": [{"filename": f"{LIB}/linear.py", "line": 125, "name": "forward"},
                            {"filename": "/work/job/model.py", "line": 18, "name": "forward"},
                            {"filename": "/work/job/train.py", "line": 40, "name": "main"}],
    "model.py:22 forward": [{"filename": f"{LIB}/activation.py", "line": 734, "name": "forward"},
                            {"filename": "/work/job/model.py", "line": 22, "name": "forward"},
                            {"filename": "/work/job/train.py", "line": 40, "name": "main"}],
    "train.py:44 main": [{"filename": "/work/job/train.py", "line": 44, "name": "main"}],
    "train.py:51 main": [{"filename": "/work/job/train.py", "line": 51, "name": "main"}],   # the leak
}
LIBRARY_FILES = {"linear.py", "activation.py"}


class Allocator:
    """Blocks at addresses, each alloc and free recorded as PyTorch's history records them; the
    truth: the allocated bytes after every event."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, int, str]] = {}    # addr -> size, requested, site
        self.trace: list[dict[str, Any]] = []
        self.truth: list[int] = []
        self.next_addr = 1 << 40
        self.clock = 1_000_000

    def alloc(self, requested: int, where: str) -> int:
        size = -(-requested // 512) * 512
        addr, self.next_addr = self.next_addr, self.next_addr + size
        self.live[addr] = (size, requested, where)
        self.event("alloc", addr, requested, where)      # the history records the size asked for
        return addr

    def free(self, addr: int) -> None:
        _, requested, where = self.live.pop(addr)
        self.event("free_requested", addr, requested, where)
        self.event("free_completed", addr, requested, where)

    def event(self, action: str, addr: int, size: int, where: str) -> None:
        self.clock += 37
        self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.clock,
                           "frames": STACKS[where], "compile_context": "", "user_metadata": ""})
        if action != "free_requested":
            self.truth.append(sum(requested for _, requested, _ in self.live.values()))

    def snapshot(self) -> dict[str, Any]:
        blocks = [{"address": addr, "size": size, "requested_size": requested, "state": "active_allocated",
                   "frames": STACKS[where]} for addr, (size, requested, where) in sorted(self.live.items())]
        blocks.append({"address": self.next_addr, "size": 3 << 20, "requested_size": 0, "state": "inactive",
                       "frames": []})
        total = sum(b["size"] for b in blocks)
        segment = {"device": 0, "address": 1 << 40, "total_size": total, "allocated_size": total - (3 << 20),
                   "active_size": total - (3 << 20), "requested_size": 0, "stream": 0, "segment_type": "large",
                   "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
        return {"segments": [segment], "device_traces": [list(self.trace)], "allocator_settings": {}}


def training(steps: int, seed: int = 0) -> Allocator:
    """Weights kept, activations freed each step, a block of train.py:51 kept every step (the leak)."""
    rng = random.Random(seed)
    heap = Allocator()
    heap.alloc((64 << 20) + 3, "train.py:44 main")   # rounded up to 512 bytes by the allocator
    for step in range(steps):
        acts = [heap.alloc(rng.randint(1, 8) << 20 | rng.randint(0, 511), "model.py:18 forward") for _ in range(3)]
        acts += [heap.alloc(rng.randint(1, 4) << 20, "model.py:22 forward")]
        heap.alloc((step + 1) << 20, "train.py:51 main")
        for addr in reversed(acts):
            heap.free(addr)
    return heap


def test_the_peak_is_the_true_one_also_where_the_ring_dropped_the_start() -> None:
    heap = training(12)
    snapshot = heap.snapshot()
    [found] = analyse(snapshot)
    assert found.peak == max(heap.truth) and found.end == heap.truth[-1] and found.start == 0
    assert found.reserved == snapshot["segments"][0]["total_size"]
    assert [v for _, v in found.timeline] == heap.truth
    # PyTorch's ring buffer (max_entries) keeps only the last entries: the history starts mid-way
    dropped = 25
    kept = [e for e in heap.trace if e["action"] != "free_requested"][dropped:]
    snapshot["device_traces"] = [[e for e in heap.trace if e in kept or (
        e["action"] == "free_requested" and heap.trace.index(e) > heap.trace.index(kept[0]))]]
    [cut] = analyse(snapshot)
    assert cut.start == heap.truth[dropped - 1] and cut.peak == max(heap.truth[dropped - 1:])
    assert cut.at_peak[0].site == BEFORE or any(h.site == BEFORE for h in cut.at_peak)


def test_the_holders_at_the_peak_and_the_leak() -> None:
    heap = training(12)
    [found] = analyse(heap.snapshot())
    peak_index = heap.truth.index(max(heap.truth))
    live: dict[int, tuple[int, str]] = {}
    changes = [e for e in heap.trace if e["action"] != "free_requested"]
    where = {id(e["frames"]): w for w, e in ((w, {"frames": f}) for w, f in STACKS.items())}
    for event in changes[:peak_index + 1]:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], where[id(event["frames"])])
        else:
            live.pop(event["addr"])
    expected: dict[str, int] = {}
    for size, name in live.values():
        expected[name] = expected.get(name, 0) + size
    assert {h.site: h.bytes for h in found.at_peak} == expected
    assert sum(h.bytes for h in found.at_peak) == found.peak
    grown = {h.site: (h.blocks, h.bytes) for h in found.growing}
    assert grown == {"train.py:51 main": (12, sum(n << 20 for n in range(1, 13))), "train.py:44 main": (1, (64 << 20) + 3)}


def test_bytes_per_site_match_pytorch_s_memory_viz() -> None:
    """torch.cuda._memory_viz.memory's flamegraph lines of the snapshot's allocated blocks: each
    block's requested bytes under its stack (outermost first), its rounding as `<gaps>`; summed
    by the innermost frame of the program's own code, they are hpcprof's bytes per site (at the
    snapshot: the blocks' holders, and those of the history still held)."""
    viz = pytest.importorskip("torch.cuda._memory_viz")
    heap = training(12)
    snapshot = heap.snapshot()
    lines = viz.memory(snapshot, format_flamegraph=lambda text: text).splitlines()
    theirs: dict[str, int] = {}
    gaps = 0
    for line in lines:
        stack, _, size = line.rpartition(" ")
        parts = stack.split(";")
        if parts[1] != "active_allocated":
            continue
        if parts[2] == "<gaps>":
            gaps += int(size)
            continue
        own = next(f for f in reversed(parts[2:]) if f.split(":")[0] not in LIBRARY_FILES)
        name, line_no, function = own.split(":")
        theirs[f"{name}:{line_no} {function}"] = theirs.get(f"{name}:{line_no} {function}", 0) + int(size)
    [found] = analyse(snapshot)
    assert {h.site: h.bytes for h in found.at_end} == theirs
    assert {h.site: h.bytes for h in found.growing} == theirs     # every allocation of this history is in it
    assert gaps == sum(size - requested for size, requested, _ in heap.live.values()) > 0
    assert sum(theirs.values()) == found.end


def test_site_is_the_program_s_innermost_frame() -> None:
    assert site(STACKS["model.py:18 forward"]) == "model.py:18 forward"
    assert site([{"filename": f"{LIB}/linear.py", "line": 1, "name": "f"}]) == "linear.py:1 f"
    assert site([{"filename": "??", "line": 0, "name": "c10::alloc"}]) == "(no Python frame)"
    assert site("not frames") == "(no Python frame)"


def test_the_command_and_its_html(tmp_path: Path) -> None:
    path = tmp_path / "rank0_snapshot.pickle"
    path.write_bytes(pickle.dumps(training(12).snapshot()))
    page = tmp_path / "memory.html"
    done = hpcprof("memory", str(path), "--html", str(page), "--top", "3", cwd=tmp_path, check=True)
    out = done.stdout
    heap = training(12)
    assert f"device 0: peak {max(heap.truth) / (1 << 30):,.2f} GiB allocated at " in out, out
    assert re.search(r"allocated during the history and still held at its end, by site:\n  train\.py:51 main\s+"
                     r"0\.08 GiB\s+12 blocks", out), out
    text = page.read_text()
    assert html.escape("rank0_snapshot.pickle, device 0: allocated memory over the history") in text
    assert "peak " in text and "Plotly" in text


def test_a_damaged_or_hostile_snapshot_is_one_line_and_the_others_are_read(tmp_path: Path) -> None:
    good = tmp_path / "good.pickle"
    good.write_bytes(pickle.dumps(training(3).snapshot()))
    (tmp_path / "cut.pickle").write_bytes(good.read_bytes()[:500])
    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    (tmp_path / "hostile.pickle").write_bytes(pickle.dumps({"segments": [Boom()]}))
    (tmp_path / "other.pickle").write_bytes(pickle.dumps({"entries": []}))
    done = hpcprof("memory", "cut.pickle", "hostile.pickle", "other.pickle", "good.pickle", "missing.pickle",
                   cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 4, errors
    assert "cut.pickle: not read as a PyTorch memory snapshot" in errors[0]
    assert "refused posix.system" in errors[1] or "refused os.system" in errors[1]
    assert "other.pickle: not a PyTorch memory snapshot (no `segments` list" in errors[2]
    assert "missing.pickle" in errors[3]
    assert "good.pickle, device 0: peak" in done.stdout and not marker.exists()
