"""The streaming parse of Kineto traces (trace/stream.py) equals the in-memory one, and its batches
stay bounded: on the committed fixtures, on generated traces with awkward text, gzip included."""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hpcprof.tools.torch.analysis import stream
from hpcprof.tools.torch.analysis.load import TraceColumns, load_trace, scan_trace
from hpcprof.tools.torch.analysis.schema import Event
from hpcprof.tools.torch.analysis.schema import Head as _Head
from hpcprof.tools.torch.analysis.stream import EventStream, TraceError, read_chunks


class _Whole(msgspec.Struct):
    """The in-memory decode: the whole document at once."""

    traceEvents: list[Event] | None = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815


def in_memory(path: Path) -> tuple[list[Event], Any]:
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    doc = msgspec.json.decode(data, type=_Whole)
    assert doc.traceEvents is not None
    return doc.traceEvents, doc.distributedInfo


def streamed(path: Path, batch_bytes: int) -> tuple[list[list[Event]], Any]:
    stream = EventStream(path, _Head, Event, batch_bytes)
    batches = list(stream)
    return batches, stream.head.distributedInfo


def fixture_traces(fixtures_dir: Path) -> list[Path]:
    return sorted((fixtures_dir / "hta").glob("*/*.json.gz"))


@pytest.mark.slow
def test_fixtures_stream_to_the_same_events(fixtures_dir: Path) -> None:
    traces = fixture_traces(fixtures_dir)
    assert len(traces) >= 8
    for path in traces:
        events, info = in_memory(path)
        for batch_bytes in (1 << 16, 1 << 20):
            batches, head = streamed(path, batch_bytes)
            assert [e for b in batches for e in b] == events, (path, batch_bytes)
            assert head == info
            assert len(batches) >= len(gzip.decompress(path.read_bytes())) // (2 * batch_bytes)


def test_fixture_trace_loads_the_same_in_any_batch_size(fixtures_dir: Path, tmp_path: Path) -> None:
    path = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    whole = TraceColumns()
    whole.add(in_memory(path)[0])  # every event in one batch: the in-memory load
    expected = whole.trace(path, 0)
    for batch_bytes in (4096, 1 << 16):
        columns = TraceColumns()
        assert scan_trace(path, columns.add, batch_bytes=batch_bytes) == 0
        got = columns.trace(path, 0)
        for name in ("gpu", "cpu", "steps"):
            assert getattr(got, name).frame().equals(getattr(expected, name).frame()), (name, batch_bytes)
        assert (got.origin, got.profiler_steps) == (expected.origin, expected.profiler_steps)
    assert load_trace(path).gpu.frame().equals(expected.gpu.frame())


def awkward_events(n: int) -> list[dict[str, Any]]:
    """Events whose text has every false boundary: `}, {` and `]` in strings and in nested objects,
    escaped quotes and backslashes, unicode, ints and floats."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": 'cudaLaunchKernel "}, {" \\', "ts": i * 10,
                    "dur": 2, "args": {"correlation": i, "nested": [{"a": "}, {"}, {"b": [1, {}]}]}})
        out.append({"ph": "X", "cat": "kernel", "name": f"gemm ] }}, {{ é {i}", "ts": i * 10 + 3.5,
                    "dur": 4.25, "args": {"stream": 7, "correlation": i, "x": {"y": {"z": "]}"}}}})
        out.append({"ph": "f", "cat": "ac2g", "name": "flow", "id": i, "ts": i * 10, "bp": "e"})
    return out


@pytest.mark.parametrize("layout", ["compact", "indented", "info_after", "gzip", "gzip_members"])
def test_generated_traces_stream_to_the_same_events(tmp_path: Path, layout: str) -> None:
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "x": "\"traceEvents\": ["}],
                           "meta": {"traceEvents": []}, "distributedInfo": {"rank": 3}}
    doc["traceEvents"] = awkward_events(300)
    if layout == "info_after":
        doc["distributedInfo"] = doc.pop("distributedInfo")
        doc["traceName"] = {"after": [{"a": 1}, {"b": "}, {"}]}
    text = json.dumps(doc, indent=2 if layout == "indented" else None).encode()
    path = tmp_path / ("t.json.gz" if layout.startswith("gzip") else "t.json")
    if layout == "gzip_members":  # concatenated gzip members (pigz, appended files)
        path.write_bytes(b"".join(gzip.compress(text[i:i + 5000]) for i in range(0, len(text), 5000)))
    else:
        path.write_bytes(gzip.compress(text) if layout == "gzip" else text)
    events, info = msgspec.json.decode(text, type=_Whole).traceEvents, {"rank": 3}
    for batch_bytes in (7, 97, 4096, 1 << 20):
        batches, head = streamed(path, batch_bytes)
        assert [e for b in batches for e in b] == events and head == info, batch_bytes
    assert scan_trace(path) == 3


@pytest.mark.slow
def test_batches_are_bounded_by_batch_bytes(tmp_path: Path) -> None:
    """The memory bound, counted rather than timed: no batch holds more events than fit in twice
    the batch's bytes of text (what is left of the last chunk plus one chunk)."""
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000000, "dur": 5}
    size = len(json.dumps(event)) + 2  # each event with its ", "
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [event] * 200_000}).encode()))
    batch_bytes = 1 << 16
    counts = [len(b) for b in EventStream(path, _Head, Event, batch_bytes)]
    assert sum(counts) == 200_000
    assert max(counts) <= 2 * batch_bytes // size
    assert len(counts) >= 200_000 * size // (2 * batch_bytes)
    # the inflated chunks are bounded too, even at gzip's extreme ratio
    blank = tmp_path / "blank.json.gz"
    blank.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 50_000_000 + b"]}"))
    assert blank.stat().st_size < 100_000
    assert max(len(c) for c in read_chunks(blank, 1 << 20)) <= 1 << 20
    assert [len(b) for b in EventStream(blank, _Head, Event, 1 << 20)] == []


@pytest.mark.slow
def test_memory_stays_near_one_batch(tmp_path: Path) -> None:
    """Peak Python allocation while streaming a 40 MB trace whose events are all dropped (CPU
    ops): a dozen batches' worth of text (decoded objects included), not the file (tracemalloc counts msgspec's objects too)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1,
               "ts": i, "dur": 1, "args": {"External id": i, "Sequence number": i}} for i in range(300_000)]
    path = tmp_path / "cpu.json.gz"
    text = json.dumps({"traceEvents": events}).encode()
    assert len(text) > 40_000_000
    path.write_bytes(gzip.compress(text, compresslevel=1))
    del events, text
    batch_bytes = 1 << 20
    columns = TraceColumns()
    tracemalloc.start()
    try:
        scan_trace(path, columns.add, batch_bytes=batch_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert columns.seen == 300_000
    assert peak < 16 * batch_bytes < 40_000_000 / 2, peak  # benchmarks/results/trace_stream_memory.txt


@pytest.mark.parametrize("content, message", [
    (b'{"traceEvents": [{"ts": 1}, {"ts": 2}', "truncated"),
    (b'{"traceEvents": [{"ts": 1}, {"ts": }]}', "malformed"),
    (b'{"traceEvents": [{"ts": 1}, 5]}', "not a Kineto JSON trace"),
    (b'{"traceEvents": [{"ts": "x"}]}', "not a Kineto JSON trace"),
    (b'{"traceEvents": [{"ts": 1}]', "truncated"),
    (b'{"traceEvents": [{"ts": 1}]} extra', "not a Kineto JSON trace"),
    (b'{"traceEvents": null}', "no traceEvents array"),
    (b'{"a": 1} {"traceEvents": []}', "not a Kineto JSON trace"),
])
def test_damaged_streams_raise_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    for batch_bytes in (4, 1 << 20):
        path.write_bytes(content)
        with pytest.raises(TraceError, match=message) as info:
            list(EventStream(path, _Head, Event, batch_bytes))
        assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("inflater", ["isal.isal_zlib", "zlib"])
def test_isal_and_zlib_inflate_alike(fixtures_dir: Path, tmp_path: Path, inflater: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """ISA-L (a dependency on x86-64 and ARM64) and zlib (elsewhere) inflate the same bytes, across gzip
    members, and a damaged gzip file is the same one-line error with either."""
    monkeypatch.setattr(stream, "INFLATE", pytest.importorskip(inflater))   # isal: absent where it has no wheel
    source = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    text = gzip.decompress(source.read_bytes())
    members = tmp_path / "members.json.gz"                   # concatenated .gz files: two members
    members.write_bytes(gzip.compress(text[:100_000], mtime=0) + gzip.compress(text[100_000:], mtime=0))
    for path in (source, members):
        assert b"".join(read_chunks(path, 1 << 16)) == text
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(source.read_bytes()[:50_000])
    with pytest.raises(TraceError, match=f"^{re.escape(str(cut))}: truncated or corrupt gzip data"):
        b"".join(read_chunks(cut))


def test_collect_decodes_each_trace_once(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpcprof collect`'s per-file step reads the trace once for the analyses, the window and the
    critical path (one decode with the union of their fields), with the same tables as separate
    loads."""
    from hpcprof.tools.torch.analysis import collect, critical_path, stream
    from hpcprof.tools.torch.analysis.analyses import all_analyses

    path = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    opened: list[Path] = []
    read = stream.read_chunks

    def counted(file: Path, size: int = stream.BATCH_BYTES) -> Any:
        opened.append(file)
        return read(file, size)

    monkeypatch.setattr(stream, "read_chunks", counted)
    tables = collect.analyse_file(path, 0)
    assert opened == [path]
    separate = all_analyses([load_trace(path, 0)])
    for name, table in separate.items():
        assert tables[name].equals(table.frame()), name
    assert tables[critical_path.EVENTS_TABLE].equals(critical_path.file_events(path, 0))
    assert len(opened) == 3


def same_trace(got: Any, expected: Any) -> None:
    for name in ("gpu", "cpu", "steps"):
        assert getattr(got, name).frame().equals(getattr(expected, name).frame()), name
    assert (got.rank, got.origin, got.profiler_steps) == (expected.rank, expected.origin, expected.profiler_steps)


@pytest.mark.slow
def test_texts_are_the_events_cut_without_decoding(fixtures_dir: Path) -> None:
    """EventStream.texts() of the traces Kineto wrote (an event per line break): the array's text in
    batches, each `[` + whole events + `]`, although their kernel names hold `}, `; decoded one by
    one they are the file's events, and the head is read as when iterating."""
    kineto = [p for p in fixture_traces(fixtures_dir) if b"},\n" in gzip.decompress(p.read_bytes())]
    assert len(kineto) >= 6
    for path in kineto:
        events, info = in_memory(path)
        for batch_bytes in (1 << 12, 1 << 20):
            stream = EventStream(path, _Head, Event, batch_bytes)
            texts = list(stream.texts())
            assert all(t.startswith(b"[") and t.endswith(b"]") for t in texts)
            decode = msgspec.json.Decoder(list[Event]).decode
            assert [e for t in texts for e in decode(t)] == events, (path, batch_bytes)
            assert stream.head.distributedInfo == info


def helpers_of_splits(monkeypatch: pytest.MonkeyPatch, *kinds: str) -> list[int]:
    """load.scan_split made to record the helpers of each call, and to check that its gatherers are
    `kinds` (class names) where given; the record."""
    from hpcprof.tools.torch.analysis import load

    calls: list[int] = []
    scan = load.scan_split

    def counted(path: Path, gatherers: Any, helpers: int) -> int | None:
        calls.append(helpers)
        assert not kinds or [type(g).__name__ for g in gatherers] == list(kinds)
        return scan(path, gatherers, helpers)

    monkeypatch.setattr(load, "scan_split", counted)
    return calls


def test_one_file_decoded_by_several_processes_loads_the_same(fixtures_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """load_trace with helpers (scan_split: batches decoded in other processes, merged in file
    order) gives the trace that one process gives, and load_traces shares its workers out over
    fewer files that way."""
    from hpcprof.tools.torch.analysis import load

    monkeypatch.setattr(load, "SPLIT_BATCH_BYTES", 1 << 16)   # many batches from a small fixture
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    path = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    expected = load_trace(path)
    split = helpers_of_splits(monkeypatch)
    same_trace(load_trace(path, helpers=3), expected)
    assert split == [3]
    [got], errors = load.load_traces([path], workers=3)     # the file's process and 2 helpers
    assert not errors and split == [3, 2]
    same_trace(got, expected)
    load.load_traces([path], workers=2)                       # 1 helper would only share the file's core
    assert split == [3, 2]
    pair = [path, path.with_name("rank1.pt.trace.json.gz")]
    got_pair, errors = load.load_traces(pair, workers=6)     # 2 files: each in a worker with 2 helpers
    assert not errors and [t.rank for t in got_pair] == [0, 1]
    same_trace(got_pair[0], expected)
    same_trace(got_pair[1], load_trace(pair[1]))


def test_collect_decodes_a_trace_on_the_cores_the_files_leave(fixtures_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """collect's per-file step on a trace given several cores (its share of the workers where they
    outnumber the files) has the batches decoded by helpers, for the analyses and the critical path
    at once, with the tables of the in-order decode; with one core per file, in its own process."""
    from concurrent.futures import ProcessPoolExecutor

    from hpcprof.analysis.registry import collector
    from hpcprof.core.pool import InProcess, cores_per_file, worker_context
    from hpcprof.run.results import to_arrow
    from hpcprof.tools.torch.analysis import collect, load

    monkeypatch.setattr(load, "SPLIT_BATCH_BYTES", 1 << 16)
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    path = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    expected = collect.analyse_file(path, 0)
    split = helpers_of_splits(monkeypatch, "TraceColumns", "CriticalPathEvents", "TraceCollectives", "IdleEvents")
    got = collect.analyse_file(path, 0, cores=4)
    assert split == [3] and sorted(got) == sorted(expected)
    for name, table in expected.items():
        assert got[name].equals(table), name
    [tables] = collector("torch", {}, 3).analyse_batch([(path, 0)])   # as a map task runs it in a worker
    assert split == [3, 2] and isinstance(tables, dict)
    assert sorted(tables) == sorted(expected)
    for name, table in tables.items():
        assert table.equals(to_arrow(expected[name], pandas_metadata=False)), name
    collector("torch", {}, 2).analyse_batch([(path, 0)])                # one helper would share the file's core
    assert split == [3, 2]
    with ProcessPoolExecutor(6, mp_context=worker_context()) as pool:
        assert [cores_per_file(pool, n) for n in (1, 2, 4, 6, 100)] == [6, 3, 1, 1, 1]
    assert cores_per_file(InProcess(), 1) == 1


def test_collect_gives_each_trace_its_share_of_the_workers(fixtures_dir: Path, tmp_path: Path) -> None:
    """collect's map over fewer trace files than workers hands each map task the cores per file
    (6 workers, 2 files: 3 each, the file's process and 2 helpers), with the tables of the map in
    one process. (Files this small are still decoded in order, load.PARALLEL_MIN_BYTES: the decode
    on helpers is the test above.)"""
    from concurrent.futures import Future, ProcessPoolExecutor

    from hpcprof.collect import InProcess, map_files
    from hpcprof.collect.cache import parts_dir
    from hpcprof.core.pool import read_bundle, worker_context

    class Recording(ProcessPoolExecutor):
        """A process pool that keeps the arguments of each task submitted."""

        def __init__(self, workers: int) -> None:
            super().__init__(workers, mp_context=worker_context())
            self.submitted: list[tuple[Any, ...]] = []

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            self.submitted.append(args)
            return super().submit(fn, *args, **kwargs)

    source = fixtures_dir / "hta" / "h200_ddp_gpt2"
    traces = {str(source / f"rank{rank}.pt.trace.json.gz"): rank for rank in (0, 1)}

    def mapped_tables(run: Path, executor: Any) -> list[Any]:
        mapped = map_files("torch", traces, run, executor, lambda line: None, print)
        parts = parts_dir(run, "torch")
        return [read_bundle(parts / part.bundle, files=slice(part.position, part.position + 1))
                for part in mapped.values()]

    expected = mapped_tables(tmp_path / "one", InProcess())
    with Recording(6) as pool:
        got = mapped_tables(tmp_path / "pool", pool)
    assert [args[-1] for args in pool.submitted] == [3, 3]      # each task: one file on 3 cores
    assert len(got) == len(expected) == 2
    for tables, want in zip(got, expected, strict=True):
        assert sorted(tables) == sorted(want) and all(tables[n].equals(want[n]) for n in want)


def test_critical_path_events_load_on_workers_and_helpers(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpcprof trace critical-path`'s load (critical_path.load_events) shares out the workers as
    load_traces does: a process per file, the cores left over as decode helpers of one file, with
    the events of one process."""
    import pandas as pd

    from hpcprof.tools.torch.analysis import critical_path, load

    monkeypatch.setattr(load, "SPLIT_BATCH_BYTES", 1 << 16)
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    pair = [fixtures_dir / "hta" / "h200_ddp_gpt2" / f"rank{r}.pt.trace.json.gz" for r in (0, 1)]
    expected, errors = critical_path.load_events(pair, workers=1)
    assert expected is not None and not errors and set(expected["rank"]) == {0, 1}
    got, errors = critical_path.load_events(pair, workers=2)          # a worker per file
    assert got is not None and not errors
    pd.testing.assert_frame_equal(got, expected)
    split = helpers_of_splits(monkeypatch)
    one, errors = critical_path.load_events(pair[:1], workers=3)     # one file: its process and 2 helpers
    assert one is not None and not errors and split == [2]
    pd.testing.assert_frame_equal(one, expected[expected["rank"] == 0].reset_index(drop=True))


SHARED_PROBE = """
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from hpcprof.tools.torch.analysis import load
load.PARALLEL_MIN_BYTES, load.SPLIT_BATCH_BYTES = 0, int(sys.argv[2])
path = Path(sys.argv[1])
sent = []
submit = ProcessPoolExecutor.submit
def recorded(self, fn, *args, **kwargs):
    sent.append(type(args[0]).__name__)
    return submit(self, fn, *args, **kwargs)
ProcessPoolExecutor.submit = recorded
split, alone = load.load_trace(path, helpers=2), load.load_trace(path)
same = all(getattr(split, n).frame().equals(getattr(alone, n).frame()) for n in ("gpu", "cpu", "steps"))
print(same, split.origin == alone.origin, ",".join(sorted(set(sent))), len(sent), load._SHARED)
"""


@pytest.mark.slow
def test_helpers_forked_here_read_the_batches_from_shared_memory_segments(fixtures_dir: Path, tmp_path: Path) -> None:
    """Helpers forked by scan_split (a process without other threads, as `hpcprof trace` and
    collect's workers are: pytest's workers here are not) read each batch from a shared mapping
    rather than through the pipe, with the trace of one process; a batch longer than a slot (an
    event of 300 kB) goes through the pipe; the mapping is gone after."""
    import subprocess
    import sys

    def probe(path: Path, batch_bytes: int) -> list[str]:
        return subprocess.run([sys.executable, "-c", SHARED_PROBE, str(path), str(batch_bytes)], capture_output=True,
                              text=True, check=True).stdout.split(maxsplit=4)

    out = probe(fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz", 1 << 16)
    assert out[:3] == ["True", "True", "tuple"] and int(out[3]) > 20 and out[4].strip() == "None", out
    events = [{"ph": "X", "cat": "kernel", "name": f"gemm_{i}" if i != 500 else "k" * 300_000, "ts": 10 * i + 2,
               "dur": 4, "args": {"stream": 7, "correlation": i}} for i in range(1000)]       # no time before 0
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10 * i, "dur": 1,
                "args": {"correlation": i}} for i in range(1000)]
    long = tmp_path / "rank0.json"
    long.write_text('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]}\n")
    out = probe(long, 1 << 14)
    assert out[:3] == ["True", "True", "bytes,tuple"] and out[4].strip() == "None", out


def test_helpers_that_cannot_start_fall_back_to_one_process(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no helper or worker process can start (fork fails with EAGAIN: a login node's process
    limit), the files are decoded in this process, with the same traces."""
    import errno
    from concurrent.futures import ProcessPoolExecutor

    from hpcprof.tools.torch.analysis import load

    class NoProcesses(ProcessPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    path = fixtures_dir / "hta" / "h200_ddp_gpt2" / "rank0.pt.trace.json.gz"
    expected = load_trace(path)
    pair = [path, path.with_name("rank1.pt.trace.json.gz")]
    expected_pair, _ = load.load_traces(pair, workers=1)
    import hpcprof.core.pool

    monkeypatch.setattr(hpcprof.core.pool, "ProcessPoolExecutor", NoProcesses)   # every pool is made by pool.process_pool
    with pytest.raises(load.SplitFailed, match="temporarily unavailable"):
        load.scan_split(path, [TraceColumns()], 2)
    same_trace(load_trace(path, helpers=2), expected)
    got_pair, errors = load.load_traces(pair, workers=6)     # no worker either: both files in this process
    assert not errors and len(got_pair) == 2
    for got, want in zip(got_pair, expected_pair, strict=True):
        same_trace(got, want)


def test_a_cut_inside_a_string_falls_back_to_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `}` followed by `,` inside a string can be where texts() cuts: that batch does not decode,
    and the file is then loaded in order by this process, with the same result."""
    from hpcprof.tools.torch.analysis import load

    path = tmp_path / "awkward.json"
    path.write_text(json.dumps({"traceEvents": awkward_events(2000)}))
    monkeypatch.setattr(load, "SPLIT_BATCH_BYTES", 97)
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    bad = 0
    try:
        for text in EventStream(path, _Head, Event, 97).texts():
            try:
                load.decode_batch(text, [TraceColumns])
            except msgspec.DecodeError:
                bad += 1
    except TraceError:      # a cut inside a string misplaces the later ones, up to the array's end
        pass
    assert bad > 0
    with pytest.raises(load.SplitFailed):
        load.scan_split(path, [TraceColumns()], 2)
    same_trace(load_trace(path, helpers=2), load_trace(path))
