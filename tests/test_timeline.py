"""The merged timeline (hpcprof.report.timeline, `hpcprof report RUN --timeline FILE`): Chrome trace
JSON held to the Trace Event Format (its JSON object form, as Perfetto and chrome://tracing read it:
the schema below, written from the format's specification; no Perfetto trace processor runs offline
here) and to the hand-built 3-rank schedule of test_critical_path, from Kineto traces and nsys exports."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_critical_path import HOST_DELAY, MM2_DELAY, simulate, write_kineto, write_nsys_export

from hpcprof.analysis.clocks import aligned
from hpcprof.analysis.critical_path import critical_path
from hpcprof.report.timeline import THREADS, chrome_trace
from hpcprof.tools.nsys.analysis import critical_path as nsys_cp
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.torch.analysis import critical_path as trace_cp

#: the Trace Event Format's JSON object form: complete ("X") events with numeric ts and dur (µs) and
#: integer pid and tid, metadata ("M") events naming processes and threads
SCHEMA = {
    "type": "object", "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["ph", "name", "pid", "tid", "ts", "dur"],
             "properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"},
                            "pid": {"type": "integer"}, "tid": {"type": "integer"},
                            "ts": {"type": "number", "minimum": 0}, "dur": {"type": "number", "minimum": 0},
                            "args": {"type": "object"}}},
            {"type": "object", "required": ["ph", "name", "pid", "args"],
             "properties": {"ph": {"const": "M"}, "pid": {"type": "integer"}, "tid": {"type": "integer"},
                            "name": {"enum": ["process_name", "process_sort_index", "thread_name", "thread_sort_index"]},
                            "args": {"type": "object"}}}]}}}}


def _kineto_events(tmp_path: Path) -> pd.DataFrame:
    paths = []
    for rank, ops in enumerate(simulate()):
        paths.append(tmp_path / f"rank{rank}.pt.trace.json.gz")
        write_kineto(paths[-1], rank, [o for o in ops if o["iteration"] >= 0], rank * 3_000_011, with_seq=True)
    events, errors = trace_cp.load_events(paths)
    assert errors == []
    return events


def _nsys_events(tmp_path: Path) -> pd.DataFrame:
    parts = []
    for rank, ops in enumerate(simulate()):
        path = tmp_path / f"rank{rank}.sqlite"
        write_nsys_export(path, rank, ops, clock_offset=rank * 1_000_003 + 17)
        parts.append(nsys_cp.rank_events(dist.load_activity([Export(path)], {str(path): rank})))
    return pd.concat(parts, ignore_index=True)


@pytest.mark.slow
@pytest.mark.parametrize("source", [_kineto_events, _nsys_events])
def test_the_timeline_is_a_chrome_trace_of_the_schedule(tmp_path: Path, source) -> None:  # type: ignore[no-untyped-def]
    import jsonschema  # here, not at collection: its format checkers build a grammar at import

    events = source(tmp_path)
    _, segments = critical_path(aligned(events)[0])                      # as collect makes them
    doc = json.loads(json.dumps(chrome_trace(events, segments)))       # as written: plain JSON
    jsonschema.validate(doc, SCHEMA)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {(e["pid"], e["args"].get("name")) for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {(r, f"rank {r}") for r in range(3)}
    threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {(r, tid, name) for r in range(3) for tid, name in THREADS}
    # one clock: every rank's all-gather of iteration 0 ends at the same time; rank 0 and 1 waited
    # HOST_DELAY for rank 2's host (its wait slice), rank 1's matmul2 held iteration 1's reduce-scatter
    first = min(int(i) for i in events["iteration"])          # ProfilerStep#10 in the Kineto traces, 0 in nsys's
    ag = [e for e in slices if e["cat"] == "collective" and e["name"] == "AllGather" and e["args"]["iteration"] == first]
    assert len(ag) == 3 and max(e["ts"] + e["dur"] for e in ag) - min(e["ts"] + e["dur"] for e in ag) < 0.01
    waits = {(e["pid"], e["args"]["iteration"] - first, e["name"]): e["dur"] for e in slices if e["cat"] == "wait"}
    assert waits[(0, 0, "AllGather wait")] == waits[(1, 0, "AllGather wait")] == HOST_DELAY / 1e3
    assert waits[(0, 1, "ReduceScatter wait")] == waits[(2, 1, "ReduceScatter wait")] == MM2_DELAY / 1e3
    assert (2, 0, "AllGather wait") not in waits and (1, 1, "ReduceScatter wait") not in waits
    steps = [e for e in slices if e["cat"] == "step"]
    assert len(steps) == 3 * 4 and len([e for e in slices if e["cat"] == "critical_path"]) == len(segments)
    assert {e["name"] for e in slices if e["cat"] == "gpu"} >= {"matmul1", "matmul2"}
