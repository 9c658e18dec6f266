"""Phase timing (CUDA events on GPU, perf_counter on CPU), cross-rank statistics and profiler hooks."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hpcprof.workloads.args import SCHEDULE_KEYS, parse_schedule  # noqa: F401  (re-exported; torch-free)


class PhaseTimer:
    """Times named phases of one iteration.

    On CUDA it records an event pair per phase on the current stream and reads them once at the
    end (no synchronisation between phases); on CPU it synchronises nothing and uses perf_counter.
    On CUDA the outermost phase of an iteration (one not inside another) also records the caching
    allocator's peak allocated and reserved bytes within it (reset_peak_memory_stats as it starts:
    host-side counters, no synchronisation) and the device's capacity, as the step hook does.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._pending: list[tuple[int, str, Any, Any, dict[str, int]]] = []
        self._depth = 0
        self.rows: list[dict[str, Any]] = []
        self.capacity = torch.cuda.get_device_properties(device).total_memory if self.cuda else 0

    @contextlib.contextmanager
    def phase(self, iteration: int, name: str) -> Iterator[None]:
        """Time the body as phase `name` of `iteration`; also an NVTX and a torch.profiler range."""
        with nvtx_range(name), torch.profiler.record_function(name):
            if self.cuda:
                outermost = self._depth == 0
                if outermost:
                    torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                end.record()
                memory = {"allocated_peak": torch.cuda.max_memory_allocated(), "reserved_peak":
                          torch.cuda.max_memory_reserved(), "capacity": self.capacity} if outermost else {}
                self._pending.append((iteration, name, start, end, memory))
            else:
                t0 = time.perf_counter()
                yield
                self.rows.append({"iteration": iteration, "phase": name, "time_ms": (time.perf_counter() - t0) * 1e3})

    def finish(self) -> list[dict[str, Any]]:
        """Resolve pending CUDA events (one synchronize) and return rows {iteration, phase, time_ms}
        (and the outermost phases' allocated_peak, reserved_peak, capacity on CUDA)."""
        if self._pending:
            torch.cuda.synchronize()
            for iteration, name, start, end, memory in self._pending:
                self.rows.append({"iteration": iteration, "phase": name, "time_ms": float(start.elapsed_time(end)),
                                  **memory})
            self._pending.clear()
        return self.rows


def phase_stats(rows: list[dict[str, Any]], phases: list[str]) -> list[dict[str, Any]]:
    """Per phase: min/mean/max across ranks of each rank's mean time, plus median and extremes over all rows.

    `rows` are {rank, iteration, phase, time_ms} from every rank.
    """
    out = []
    for phase in phases:
        per_rank: dict[int, list[float]] = {}
        for row in rows:
            if row["phase"] == phase:
                per_rank.setdefault(row["rank"], []).append(row["time_ms"])
        if not per_rank:
            continue
        rank_means = [statistics.fmean(v) for v in per_rank.values()]
        every = [t for v in per_rank.values() for t in v]
        out.append(
            {
                "phase": phase,
                "ranks": len(per_rank),
                "samples": len(every),
                "mean_ms": statistics.fmean(rank_means),
                "min_rank_mean_ms": min(rank_means),
                "max_rank_mean_ms": max(rank_means),
                "median_ms": statistics.median(every),
                "min_ms": min(every),
                "max_ms": max(every),
            }
        )
    return out


def cuda_enabled() -> bool:
    """True when NVTX and the CUDA profiler API can be called."""
    return torch.cuda.is_available()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX push/pop range on GPU; nothing on CPU."""
    if cuda_enabled():
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()
    else:
        yield


def profiler_start() -> None:
    """cudaProfilerStart (the capture range of nsys -c cudaProfilerApi and ncu --profile-from-start off)."""
    if cuda_enabled():
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()


def profiler_stop() -> None:
    """Synchronize, then cudaProfilerStop."""
    if cuda_enabled():
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


@contextlib.contextmanager
def profiler_range(on: bool) -> Iterator[None]:
    """cudaProfilerStart/Stop around the body when `on`."""
    if on:
        profiler_start()
    try:
        yield
    finally:
        if on:
            profiler_stop()


def trace_dir() -> Path:
    """$HPCPROF_PROFILE_DIR, else ./profiles/torch."""
    return Path(os.environ.get("HPCPROF_PROFILE_DIR") or Path("profiles") / "torch")


@dataclass
class TorchTraceWriter:
    """on_trace_ready handler: rank<N>.pt.trace.json[.gz]; later schedule cycles get .cycle<k>."""

    directory: Path
    rank: int
    gzip_output: bool
    written: int = 0

    def __call__(self, prof: torch.profiler.profile) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        cycle = "" if self.written == 0 else f".cycle{self.written}"
        suffix = ".pt.trace.json.gz" if self.gzip_output else ".pt.trace.json"
        prof.export_chrome_trace(str(self.directory / f"rank{self.rank}{cycle}{suffix}"))
        self.written += 1


def make_torch_profiler(rank: int, schedule: dict[str, int], gzip_output: bool) -> torch.profiler.profile:
    """A torch.profiler.profile with CPU (+CUDA) activities writing one Kineto trace per rank."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(**schedule),
        on_trace_ready=TorchTraceWriter(trace_dir(), rank, gzip_output),
        record_shapes=os.environ.get("HPCPROF_TORCH_SHAPES") == "1",
        with_stack=os.environ.get("HPCPROF_TORCH_STACK") == "1",
        profile_memory=os.environ.get("HPCPROF_TORCH_MEMORY") == "1",
    )


def profiler_iterations(schedule: dict[str, int], iterations: int) -> tuple[set[int], set[int]]:
    """(touched, recorded) iterations of a loop that calls `step()` of a torch.profiler driven by
    `schedule` after each. Touched: those whose time holds the profiler's work, the ones it warms up
    or records in and the one after each trace it writes (the trace is gathered and written in
    `step()`, and the other ranks wait for it in that iteration's first collective). Recorded: the
    ones it records in, its steady state."""
    from torch.profiler import ProfilerAction

    action = torch.profiler.schedule(**schedule)
    recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    recorded = {i for i in range(iterations) if action(i) in recording}
    touched = recorded | {i for i in range(iterations) if action(i) == ProfilerAction.WARMUP
                          or (i > 0 and action(i - 1) == ProfilerAction.RECORD_AND_SAVE)}
    return touched, recorded


def torch_gzip_requested(flag: bool) -> bool:
    return flag or os.environ.get("HPCPROF_TORCH_GZIP", "") == "1"


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write JSON whole or not at all (hpcprof.core.atomic)."""
    from hpcprof.core.atomic import atomic_write

    return atomic_write(path, json.dumps(payload, indent=1, default=str), what="workload results")
