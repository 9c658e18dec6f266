"""The real H200 memory runs (tests/fixtures/gpu/memory/, made by benchmarks/gpu/memory.sh): a CUDA
OOM through hpcprof said in one sentence from its recorded files, and a snapshot with a planted
leak read by `hpcprof memory` against the program's own torch.cuda.max_memory_allocated and
PyTorch's torch.cuda._memory_viz."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu" / "memory"
#: what `hpcprof status` said of the run on the GPU machine (benchmarks/results/memory_gpu.txt)
SAID = ("rank 1 ran out of CUDA memory at `oom_plant.py:17 keep_activation` (asking 2.00 GiB; 138.2 of 139.8 GiB "
        "allocated, 0.0 GiB reserved but free); 138.0 GiB were held by `oom_plant.py:17 keep_activation` (69 blocks "
        "allocated during the history and still held); rank 0 was waiting for it in all_reduce #70 of the default "
        "group")
#: the leak program's own peak (it printed it) and the leak's line
MAX_MEMORY_ALLOCATED = 1_293_099_520


@pytest.mark.slow
def test_the_real_oom_is_one_sentence(tmp_path: Path) -> None:
    from hpcprof.analysis.forensics.verdict import analyse
    from hpcprof.run.rundir import RunDir
    from hpcprof.schedulers.base import FAILED

    with tarfile.open(FIXTURES / "oom_run.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    [run] = tmp_path.iterdir()
    found = analyse(RunDir(run), FAILED)
    assert found.sentence == SAID
    assert found.stack[:2] == ["rank 1 raised torch.OutOfMemoryError, most recent call first:",
                               "  oom_plant.py:17 keep_activation"]
    assert [row.entered for row in found.ranks] == ["all_reduce #70", "all_reduce #69"]


def test_the_leak_snapshot_s_peak_and_leak() -> None:
    """The history (recorded from the program's first allocation) reaches the program's own peak
    but for the allocator's rounding of the small blocks then held: 508 bytes, a 4-byte tensor
    (the loss) held in a 512-byte block."""
    from hpcprof.analysis.memory import analyse, read_snapshot

    snapshot = read_snapshot(FIXTURES / "leak_snapshot.pickle")
    [found] = analyse(snapshot)
    assert found.start == 0 and found.peak == MAX_MEMORY_ALLOCATED - (512 - 4)
    assert found.growing[0].site == "leak_snapshot.py:22 train" and found.growing[0].blocks == 12
    assert found.growing[0].bytes == sum(step * (8 << 20) for step in range(1, 13))
    assert found.at_peak[0].site == "leak_snapshot.py:22 train"


def test_the_leak_snapshot_s_peak_by_kind_matches_the_program_s_shapes() -> None:
    """By kind, against what the program allocates (benchmarks/gpu/memory/leak_snapshot.py): the
    parameters of Linear(2048, 8192) and Linear(8192, 2048) in float32, AdamW's two state tensors a
    parameter (its step counters are on the CPU), and the program's own at the peak (during step 12's
    optimizer step): the 11 leak blocks of steps 1-11 and the 4-byte loss. The kinds add up to the peak."""
    from hpcprof.analysis.memory import analyse, read_snapshot

    [found] = analyse(read_snapshot(FIXTURES / "leak_snapshot.pickle"))
    kinds = {h.site: h.bytes for h in found.kinds_at_peak}
    parameters = (2048 * 8192 + 8192 + 8192 * 2048 + 2048) * 4
    assert kinds["parameters"] == parameters
    assert kinds["optimizer state"] == 2 * parameters
    assert kinds["the program's own"] == sum(step * (8 << 20) for step in range(1, 12)) + 4
    assert kinds["backward (no Python frame)"] >= parameters          # the gradients, not yet set to None
    assert sum(kinds.values()) == found.peak


def test_without_python_stacks_no_kind_is_told() -> None:
    """A history recorded without stacks has no Python frame anywhere: the kinds are not guessed
    (every allocation would look like the backward's), the peak and its holders stay."""
    from hpcprof.analysis.memory import analyse, read_snapshot

    snapshot = read_snapshot(FIXTURES / "leak_snapshot.pickle")
    for event in snapshot["device_traces"][0]:
        event["frames"] = []
    for segment in snapshot["segments"]:
        for block in segment.get("blocks") or []:
            block["frames"] = []
    [found] = analyse(snapshot)
    assert found.kinds_at_peak == [] and found.peak == MAX_MEMORY_ALLOCATED - (512 - 4)
    assert sum(h.bytes for h in found.at_peak) == found.peak


def test_the_leak_snapshot_s_bytes_match_pytorch_s_memory_viz() -> None:
    """torch.cuda._memory_viz.memory of the same snapshot: its allocated blocks' bytes by stack
    (innermost frame of the program's own code, as hpcprof names a site) are hpcprof's."""
    viz = pytest.importorskip("torch.cuda._memory_viz")
    from hpcprof.analysis.memory import analyse, read_snapshot

    snapshot = read_snapshot(FIXTURES / "leak_snapshot.pickle")
    theirs: dict[str, int] = {}
    for line in viz.memory(snapshot, format_flamegraph=lambda text: text).splitlines():
        stack, _, size = line.rpartition(" ")
        parts = stack.split(";")
        if parts[1] != "active_allocated" or parts[2] == "<gaps>":
            continue
        own = [f for f in parts[2:] if f.startswith("leak_snapshot.py:")]
        name = " ".join(own[-1].rsplit(":", 1)) if own else "(no Python frame)"
        theirs[name] = theirs.get(name, 0) + int(size)
    [found] = analyse(snapshot)
    assert {h.site: h.bytes for h in found.at_end} == theirs
