"""Loading Kineto traces: ranks, ns rounding, last-step filtering, and the documented deviations."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from hpcprof.tools.torch.analysis import analyses as A
from hpcprof.tools.torch.analysis.load import TraceError, _codes, _distinct, load_trace, load_traces


def write_trace(path: Path, events: list[dict[str, Any]], rank: int | None = None) -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 8}
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
            "dur": dur, "args": {"correlation": corr}}


def kernel(ts: float, dur: float, corr: int, name: str = "gemm", cat: str = "kernel",
           stream: int = 7) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr, "device": 0}}


def cpu_op(ts: float, dur: float, name: str = "aten::mm") -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_gzip_and_plain_json_give_the_same_trace(tmp_path: Path) -> None:
    events = [launch(0, 2, 1), kernel(10, 10, 1)]
    plain = load_trace(write_trace(tmp_path / "a.json", events))
    packed = load_trace(write_trace(tmp_path / "a.json.gz", events))
    assert plain.gpu.frame().equals(packed.gpu.frame()) and plain.cpu.frame().equals(packed.cpu.frame())


def test_rank_from_distributed_info_then_file_name(tmp_path: Path) -> None:
    events = [launch(0, 2, 1), kernel(10, 10, 1)]
    assert load_trace(write_trace(tmp_path / "worker_rank3.json", events, rank=5)).rank == 5
    assert load_trace(write_trace(tmp_path / "worker_rank3.json", events)).rank == 3
    assert load_trace(write_trace(tmp_path / "rank-12.trace.json", events)).rank == 12
    assert load_trace(write_trace(tmp_path / "plain.json", events)).rank == 0
    assert load_trace(write_trace(tmp_path / "plain.json", events), rank=7).rank == 7


def test_same_rank_twice_is_an_error(tmp_path: Path) -> None:
    events = [launch(0, 2, 1), kernel(10, 10, 1)]
    a = write_trace(tmp_path / "a.json", events, rank=1)
    b = write_trace(tmp_path / "b.json", events, rank=1)
    traces, errors = load_traces([a, b])
    assert [t.path for t in traces] == [a]
    assert errors == [f"{b}: rank 1 already loaded from {a}"]


def test_ranks_filter_and_directories(fixtures_dir: Path) -> None:
    folder = fixtures_dir / "hta" / "trace_filter"
    traces, errors = load_traces([folder], ranks={1})
    assert not errors and [t.rank for t in traces] == [1]
    assert traces[0].path.name == "sampled_rank-1.json.gz"


def test_worker_processes_load_the_same(tmp_path: Path, fixtures_dir: Path) -> None:
    folder = fixtures_dir / "hta" / "trace_filter"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    serial, serial_errors = load_traces([folder, bad], workers=1)
    parallel, parallel_errors = load_traces([folder, bad], workers=3)
    assert serial_errors == parallel_errors and len(parallel_errors) == 1
    assert [t.rank for t in parallel] == [0, 1]
    for a, b in zip(serial, parallel, strict=True):
        assert a.gpu.frame().equals(b.gpu.frame()) and a.cpu.frame().equals(b.cpu.frame())


def test_rank_override_for_collect(fixtures_dir: Path) -> None:
    path = fixtures_dir / "hta" / "trace_compare" / "base" / "base.json.gz"
    assert load_trace(path).rank == 1  # distributedInfo
    traces, _ = load_traces([path], rank_of={path: 4})
    assert traces[0].rank == 4


def test_include_last_profiler_step(fixtures_dir: Path) -> None:
    path = fixtures_dir / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    default = load_trace(path)
    everything = load_trace(path, include_last_profiler_step=True)
    assert default.profiler_steps == [551] and everything.profiler_steps == [551, 552]
    assert len(everything.gpu) > len(default.gpu)
    assert np.isin(default.gpu["correlation"], everything.gpu["correlation"]).all()


def test_no_filtering_with_a_single_profiler_step(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 50},
              launch(1, 2, 1), kernel(10, 10, 1), launch(60, 2, 2), kernel(70, 10, 2)]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert trace.profiler_steps == [3] and len(trace.gpu) == 2


def test_last_step_is_dropped_with_two_steps(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 50},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 55, "dur": 50},
              launch(1, 2, 1), kernel(10, 10, 1), launch(60, 2, 2), kernel(70, 10, 2)]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert trace.profiler_steps == [3] and trace.gpu["correlation"].tolist() == [1]


def test_ns_resolution_rounds_to_whole_microseconds(tmp_path: Path) -> None:
    events = [launch(1.5, 2.0, 1), kernel(10.2, 9.7, 1)]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    row = trace.gpu.frame().iloc[0]
    assert (row["ts"] + trace.origin, row["end"] + trace.origin, row["dur"]) == (11, 19, 8)
    us = load_trace(write_trace(tmp_path / "u.json", [launch(1, 2, 1), kernel(10, 9.7, 1)]))
    assert us.gpu["dur"][0] == 9.7  # integer timestamps are not rounded, as in HTA


def test_sub_microsecond_event_as_hta_or_clamped(tmp_path: Path) -> None:
    """HTA 0.5.0 rounds this memset to [11, 10), a duration of -1 (and its temporal breakdown
    then fails its own non_compute_time >= 0 assertion); hpcprof does the same by default, and
    with the named deviation `clamp_sub_us` gives it duration 0."""
    events = [launch(1.5, 2.0, 1), kernel(10.2, 0.5, 1, "Memset (Device)", "gpu_memset"),
              launch(3.0, 2.0, 2), kernel(20.0, 5.0, 2)]
    path = write_trace(tmp_path / "t.json", events)
    assert load_trace(path).gpu["dur"].tolist() == [-1, 5]
    trace = load_trace(path, clamp_sub_us=True)
    assert trace.gpu["dur"].tolist() == [0, 5]
    row = A.temporal_breakdown([trace]).frame().iloc[0]
    assert (row["kernel_time(us)"], row["idle_time(us)"], row["compute_time(us)"],
            row["non_compute_time(us)"]) == (14, 9, 5, 0)


def test_kernel_without_launch_in_trace_as_hta_or_ignored(tmp_path: Path) -> None:
    """HTA 0.5.0 compares a kernel whose launch is not in the trace with the first event of the
    file (here a CPU op at 1000 µs) and calls its 80 µs gap host wait; hpcprof does the same, and
    with the named deviation `ignore_unmatched_launches` leaves its launch unknown (other)."""
    events = [cpu_op(1000, 5), launch(0, 2, 1), kernel(10, 10, 1), kernel(100, 10, 99)]
    path = write_trace(tmp_path / "t.json", events)
    trace = load_trace(path)
    assert trace.gpu["launch_ts"].tolist() == [0, 1000]
    idle = A.idle_time_breakdown([trace]).frame()
    assert idle[["idle_category", "idle_time"]].values.tolist() == [["host_wait", 80.0], ["other", 0.0]]
    trace = load_trace(path, ignore_unmatched_launches=True)
    assert np.isnan(trace.gpu["launch_ts"]).tolist() == [False, True]
    idle = A.idle_time_breakdown([trace]).frame()
    assert idle[["idle_category", "idle_time"]].values.tolist() == [["other", 80.0]]


def test_host_wait_and_kernel_wait(tmp_path: Path) -> None:
    events = [launch(0, 2, 1), kernel(10, 10, 1), launch(5, 2, 2), kernel(25, 10, 2),
              launch(50, 2, 3), kernel(60, 10, 3), launch(61, 2, 4), kernel(200, 10, 4)]
    idle = A.idle_time_breakdown([load_trace(write_trace(tmp_path / "t.json", events))]).frame()
    got = dict(zip(idle["idle_category"], idle["idle_time"], strict=True))
    assert got == {"host_wait": 25.0, "kernel_wait": 5.0, "other": 130.0}
    short = A.idle_time_breakdown([load_trace(tmp_path / "t.json")], consecutive_kernel_delay=4).frame()
    assert dict(zip(short["idle_category"], short["idle_time"], strict=True))["other"] == 135.0


@pytest.mark.parametrize("content, message", [
    (b"", "not a Kineto JSON trace"),
    (b"hello", "not a Kineto JSON trace"),
    (b"[1, 2]", "not a Kineto JSON trace"),
    (b"{}", "no traceEvents array"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 2}]}',
     "no GPU events"),
    (gzip.compress(b'{"traceEvents": [1, 2, 3]}', mtime=0)[:-12], "truncated or corrupt gzip"),
])
def test_bad_files_raise_trace_error_naming_the_file(tmp_path: Path, content: bytes,
                                                     message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}: ")


def test_truncated_fixture(tmp_path: Path, fixtures_dir: Path) -> None:
    source = fixtures_dir / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(source.read_bytes()[:50_000])
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(gzip.decompress(source.read_bytes())[:500_000])
    for path, message in ((cut_gz, "corrupt gzip"), (cut_json, "truncated")):
        with pytest.raises(TraceError, match=message):
            load_trace(path)


def test_no_gpu_events_after_filtering_suggests_the_flag(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 50},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 55, "dur": 50},
              launch(60, 2, 2), kernel(70, 10, 2)]
    path = write_trace(tmp_path / "t.json", events)
    with pytest.raises(TraceError, match="--include-last-step"):
        load_trace(path)
    assert len(load_trace(path, include_last_profiler_step=True).gpu) == 1


def test_odd_stream_values_are_not_streams(tmp_path: Path) -> None:
    odd = kernel(30, 5, 2)
    odd["args"]["stream"] = "not-a-stream"
    trace = load_trace(write_trace(tmp_path / "t.json", [launch(0, 2, 1), kernel(10, 10, 1),
                                                         launch(1, 1, 2), odd]))
    assert trace.gpu["correlation"].tolist() == [1]


@pytest.mark.parametrize("values", [
    [],
    [None, None],
    ["b", "a", None, "b", "ProfilerStep#3", "a"],
    [1, "1", 1.0, True, None, 2, 2.5, False, 0, "x", 2.5],   # JSON's kinds: 1, 1.0 and True are one value, as in pandas
    ["nccl:all_reduce"] * 50 + [None] * 3 + ["aten::mm", 7] * 20,
])
def test_factorize_equals_pandas_on_json_values(values: list[Any]) -> None:
    """batch_columns' factorize (no pandas in scan_split's helpers) gives pd.factorize's codes and values,
    of the values and of a part of them."""
    uniques = _distinct(values)
    codes = _codes(values, uniques)
    assert _codes(values[1::2], uniques).tolist() == codes[1::2].tolist()
    expected_codes, expected_uniques = pd.factorize(np.array(values, dtype=object))
    assert codes.dtype == np.int64 and codes.tolist() == expected_codes.tolist()
    assert uniques.dtype == object and uniques.tolist() == expected_uniques.tolist()
    assert [type(u) for u in uniques.tolist()] == [type(u) for u in expected_uniques.tolist()]


def test_an_event_kineto_ends_before_its_start_is_no_time_in_the_window(tmp_path: Path) -> None:
    """Kineto's µs rounding can end a memset 1 µs before its start; loading allows it (the clock's
    slack) and the window's GPU time per name counts it as 0, never negative."""
    from hpcprof.tools.torch.analysis.window import trace_window, window_kernels

    events = [launch(0, 2, 1), kernel(10, 10, 1), launch(3, 2, 2, "cudaMemsetAsync"),
              kernel(25, -1, 2, "[memset]", cat="gpu_memset"), launch(5, 2, 3), kernel(30, 5, 3)]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    window, _ = trace_window(trace)
    times = window_kernels(trace, window).set_index("name")["total_ns"].to_dict()
    assert times == {"gemm": 15_000, "[memset]": 0}
