"""Traces far past HTA's memory wall: N ranks x M MB of Kineto JSON analysed in bounded memory.

The ranks of a real trace (`hta/h200_ddp_gpt2`, a 2-rank DDP run on H200s) are scaled up by repeating
their events (shifted in time, with new correlation ids and ProfilerStep numbers, as trace_speed.py
does) into `--ranks` files of at least `--target-mb` MB of JSON each (`.json.gz`: a gzip member with the
rank's header, then one with the events, shared by the ranks made from the same source rank). Then,
in a subprocess: `load_traces` (streaming decode, one worker per core) and the five analyses of
`hpcprof trace all`, timed; the peak memory of that process and its workers (PSS, sampled every
10 ms) is the figure for the goal (< 2 GB). The floor is read + inflate + msgspec decode of the
fields used, whole file in memory, file after file in one process (its peak memory printed too).

    PYTHONPATH=. .venv/bin/python benchmarks/trace_stream.py [--ranks 8] [--target-mb 500]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from hpcprof.tools.torch.analysis.stream import read_chunks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_speed import FIXTURES, FLOOR_DRIVER, run_sampled  # noqa: E402

DRIVER = r"""
import json, resource, sys, time
from hpcprof.tools.torch.analysis.analyses import all_analyses
from hpcprof.tools.torch.analysis.load import load_traces
def hwm_kb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM")).split()[1])
base = hwm_kb()
t0 = time.perf_counter()
traces, errors = load_traces([sys.argv[1]])
assert not errors, errors
t1 = time.perf_counter()
tables = all_analyses(traces)
t2 = time.perf_counter()
json.dump({"load_s": t1 - t0, "analyses_s": t2 - t1, "base_kb": base, "peak_kb": hwm_kb(),
           "child_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
           "ranks": [t.rank for t in traces], "gpu_events": sum(len(t.gpu) for t in traces),
           "rows": {k: len(v) for k, v in tables.items()}}, open(sys.argv[2], "w"))
"""


def copies_of(events: list[dict[str, Any]], copies: int) -> Any:
    """`events` repeated `copies` times, each copy shifted past the previous one (JSON bytes, one
    copy at a time, without the surrounding brackets)."""
    once = [e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"]
    timed = [e for e in events if not (e.get("ph") == "M" or e.get("cat") == "Trace")]
    start = min(e["ts"] for e in timed)
    period = math.ceil(max(e["ts"] + (e.get("dur") or 0) for e in timed) - start) + 1000
    corr_span = 1 + max(max(e.get("args", {}).get("correlation", 0), e.get("args", {}).get("External id", 0))
                        for e in timed)
    steps = [int(e["name"].split("#")[1]) for e in timed if e.get("name", "").startswith("ProfilerStep#")]
    step_span = max(steps) - min(steps) + 1
    yield msgspec.json.encode(once)[1:-1]
    for i in range(copies):
        out = []
        for e in timed:
            c = dict(e, ts=e["ts"] + i * period)
            if "args" in e:
                c["args"] = args = dict(e["args"])
                for key in ("correlation", "External id"):
                    if key in args:
                        args[key] += i * corr_span
            if "id" in e:
                c["id"] = e["id"] + i * corr_span
            if e.get("name", "").startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + i * step_span}"
            out.append(c)
        yield msgspec.json.encode(out)[1:-1]


def make_traces(ranks: int, target_mb: float, workdir: Path) -> Path:
    """`ranks` files of about `target_mb` MB of JSON each under `workdir` (kept for reruns)."""
    sources = sorted((FIXTURES / "h200_ddp_gpt2").glob("*.json.gz"))
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in sources]
    size = min(len(msgspec.json.encode(d["traceEvents"])) for d in docs)
    copies = max(1, math.ceil(target_mb * 1e6 / size))  # every rank at least target_mb
    folder = workdir / f"h200_ddp_gpt2_{ranks}x{copies}"
    if folder.is_dir() and len(list(folder.glob("*.json.gz"))) == ranks:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    bodies = []
    for i, doc in enumerate(docs):
        body = folder / f".events{i}.gz"
        with gzip.open(body, "wb", compresslevel=1) as out:
            parts = copies_of(doc["traceEvents"], copies)
            out.write(next(parts))
            for part in parts:
                out.write(b",\n" + part)
            out.write(b"\n]}\n")
        bodies.append(body)
    for rank in range(ranks):
        doc = dict(docs[rank % len(docs)], traceEvents=None)
        doc["distributedInfo"] = dict(doc["distributedInfo"], rank=rank, world_size=ranks)
        header = msgspec.json.encode({k: v for k, v in doc.items() if k != "traceEvents"})
        with open(folder / f"rank{rank}.pt.trace.json.gz", "wb") as out:
            out.write(gzip.compress(header[:-1] + b', "traceEvents": [\n'))
            with open(bodies[rank % len(docs)], "rb") as body_file:
                while chunk := body_file.read(16 << 20):
                    out.write(chunk)
    for body in bodies:
        body.unlink()
    return folder


def json_bytes(path: Path) -> int:
    """Uncompressed size of a (multi-member) gzip file."""
    return sum(len(chunk) for chunk in read_chunks(path, 64 << 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--target-mb", type=float, default=500, help="JSON per rank file")
    parser.add_argument("--limit-mb", type=float, default=2048, help="the memory goal (all processes)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hpcprof-trace-stream")
    args = parser.parse_args()
    folder = make_traces(args.ranks, args.target_mb, args.workdir)
    files = sorted(folder.glob("*.json.gz"))
    sizes = [json_bytes(p) for p in files]
    print(f"== {len(files)} ranks from hta/h200_ddp_gpt2, in {folder}: "
          f"{min(sizes) / 1e6:.0f}-{max(sizes) / 1e6:.0f} MB JSON each ({sum(sizes) / 1e9:.2f} GB), "
          f"{sum(p.stat().st_size for p in files) / 1e6:.0f} MB gzip; {os.cpu_count()} CPU cores")
    result = args.workdir / "stream.json"
    tree_kb = run_sampled([sys.executable, "-c", DRIVER, str(folder), str(result)], result.with_suffix(".log"))
    ours = json.loads(result.read_text())
    floor_json = args.workdir / "floor.json"
    floor_kb = run_sampled([sys.executable, "-c", FLOOR_DRIVER, str(folder), str(floor_json), "1"],
                           floor_json.with_suffix(".log"))
    floor = json.loads(floor_json.read_text())["floor_s"]
    total = ours["load_s"] + ours["analyses_s"]
    print(f"  ranks loaded {ours['ranks']}, {ours['gpu_events']} GPU events; rows: {ours['rows']}")
    print(f"  load (streaming, workers) {ours['load_s']:.1f} s + analyses {ours['analyses_s']:.1f} s = {total:.1f} s")
    print(f"  peak memory, all processes (PSS): {tree_kb / 1024:.0f} MiB "
          f"(goal < {args.limit_mb:.0f} MiB: {'met' if tree_kb / 1024 < args.limit_mb else 'missed'}); "
          f"main process VmHWM {ours['peak_kb'] / 1024:.0f} MiB ({ours['base_kb'] / 1024:.0f} after imports), "
          f"largest worker {ours['child_kb'] / 1024:.0f} MiB")
    print(f"  floor (read + inflate + msgspec decode of the fields used, whole file in memory, one file "
          f"after another): {floor:.1f} s, peak {floor_kb / 1024:.0f} MiB; hpcprof = {total / floor:.2f}x the floor")


if __name__ == "__main__":
    main()
