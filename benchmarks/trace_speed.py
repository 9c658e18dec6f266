"""hpcprof vs HTA 0.5.0 on the five torch.profiler trace analyses: same traces, same run.

HTA is run from its own virtual environment (it pins plotly, jupyterlab, ... and pandas<3, which
must not enter hpcprof's). Set it up once:

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0 'pandas<3'

Then, from the repository root:

    .venv/bin/python benchmarks/trace_speed.py [--target-mb 25] [--repeat 3] [--hta-python PY]

(`--hta-python` defaults to /tmp/hta-venv/bin/python.)

Real fixtures (`hta/trace_filter`: 2 ranks, µs timestamps, NCCL; `hta/ns_resolution_trace`:
1 rank, ns timestamps; `hta/h200_ddp_gpt2`: a 2-rank DDP run on H200s, the large case with
`--fixtures h200_ddp_gpt2 --target-mb 72`) are scaled up by repeating their events (shifted in
time, with new correlation ids and ProfilerStep numbers) into .json.gz files of about
`--target-mb` MB each under `--workdir`. Each tool then runs in its own subprocess: load all
ranks, then temporal breakdown, comm/comp overlap, GPU kernel breakdown, idle time breakdown and
kernel launch stats for every rank. The tools' runs alternate, `--repeat` times each; times are
measured inside each process (imports excluded), the fastest run counts. Memory (first run): the
main process's peak RSS (VmHWM) with its RSS after the imports and the difference, and the peak
PSS of the process with its workers (sampled from outside every 20 ms): both tools parse the
ranks in a pool of worker processes by default. The results of both are compared number by
number before the ratios are printed, with the floor: reading, inflating and decoding (msgspec)
the fields used, whole files in memory, one after the other in one process. hpcprof inflates
with ISA-L where `isal` is installed (a dependency on x86-64 and ARM64), as the floor does. Last, `hpcprof
collect`'s map of the same files (hpcprof.collect.map_files: the analyses, the window and the
critical path's events of each file, written as bundles) in a pool of one worker per file (each
file on one core) and of one worker per core (the cores the files leave decode their batches),
and the load of `hpcprof trace critical-path` (critical_path.load_events) in one process and on
all cores.

As a user waits (goal: >= 20x HTA's speed, <= 0.2 of its peak memory, both the largest
process and all processes summed): each tool as a whole process, imports included, alternated
--repeat times: `hpcprof trace all DIR --format csv` (the console script, bytecode compiled) and a
Python process that imports HTA and runs its load and five analyses; wall time (median, of runs
nobody samples), the peak RSS of the largest process (the kernel's accounting of the waited-for
process tree) and the peak PSS of all of them (sampled every 20 ms in one more round, first),
printed beside the in-process figures above.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fixture_files import materialize  # noqa: E402  (the repository's fixtures, unpacked)

FIXTURES = materialize(REPO / ".fixtures") / "hta"

HTA_DRIVER = r"""
import json, sys, time
from hta.trace_analysis import TraceAnalysis
def hwm_kb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM")).split()[1])
base = hwm_kb()
times = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    a = TraceAnalysis(trace_dir=sys.argv[1])
    ranks = a.t.get_ranks()
    t1 = time.perf_counter()
    types, kernels = a.get_gpu_kernel_breakdown(visualize=False)
    tables = {
        "temporal": a.get_temporal_breakdown(visualize=False),
        "overlap": a.get_comm_comp_overlap(visualize=False),
        "kernel_types": types,
        "kernels": kernels,
        "idle": a.get_idle_time_breakdown(ranks=ranks, visualize=False)[0],
        "launch": __import__("pandas").concat(
            [df.assign(rank=r) for r, df in
             a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False).items()]),
    }
    times.append((time.perf_counter() - t0, t1 - t0, time.perf_counter() - t1))
    peak = peak if times[1:] else hwm_kb()
    del a
total, load, analyses = min(times)
json.dump({"load_s": load, "analyses_s": analyses, "base_kb": base, "peak_kb": peak,
           "tables": {k: v.to_json(orient="split", index=False) for k, v in tables.items()}},
          open(sys.argv[2], "w"))
"""

HPCPROF_DRIVER = r"""
import json, sys, time
from hpcprof.tools.torch.analysis import analyses as A
from hpcprof.tools.torch.analysis.load import load_traces
def hwm_kb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM")).split()[1])
base = hwm_kb()
times = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    traces, errors = load_traces([sys.argv[1]])
    assert not errors, errors
    t1 = time.perf_counter()
    tables = {
        "temporal": A.temporal_breakdown(traces),
        "overlap": A.comm_comp_overlap(traces),
        "kernel_types": A.kernel_type_breakdown(traces),
        "kernels": A.kernel_breakdown(traces),
        "idle": A.idle_time_breakdown(traces),
        "launch": A.kernel_launch_stats(traces),
    }
    times.append((time.perf_counter() - t0, t1 - t0, time.perf_counter() - t1))
    peak = peak if times[1:] else hwm_kb()
    del traces
total, load, analyses = min(times)
json.dump({"load_s": load, "analyses_s": analyses, "base_kb": base, "peak_kb": peak,
           "tables": {k: v.frame().to_json(orient="split", index=False) for k, v in tables.items()}},
          open(sys.argv[2], "w"))
"""

CORES_DRIVER = r"""
import json, os, pathlib, sys, tempfile, time
from hpcprof.tools.torch.analysis.critical_path import load_events
from hpcprof.collect import map_files
from hpcprof.core.pool import make_executor
from hpcprof.collect.runs import _worker_modules
files = sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.name.endswith((".json", ".json.gz")))
result = {}
for label, workers in (("one core per file", len(files)), ("all cores", os.cpu_count() or 1)):
    times = []
    for _ in range(int(sys.argv[3])):
        with tempfile.TemporaryDirectory() as run:
            executor, _ = make_executor(workers, _worker_modules())
            t0 = time.perf_counter()
            mapped = map_files("torch", {str(p): i for i, p in enumerate(files)}, pathlib.Path(run), executor,
                               lambda line: None, print)
            times.append(time.perf_counter() - t0)
            executor.shutdown()
            assert len(mapped) == len(files), mapped
    result["collect, " + label] = min(times)
for label, workers in (("one process", 1), ("all cores", None)):
    times = []
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter()
        events, errors = load_events(files, workers)
        times.append(time.perf_counter() - t0)
        if errors:  # traces without iterations (no ProfilerStep with NCCL work) have no critical path
            result["critical-path skipped"] = errors[0]
            break
        assert events is not None
    result["critical-path, " + label] = min(times)
json.dump(result, open(sys.argv[2], "w"))
"""

#: HTA's load and five analyses as a user's script runs them (imports included, nothing kept)
HTA_WHOLE = r"""
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
ranks = a.t.get_ranks()
a.get_gpu_kernel_breakdown(visualize=False)
a.get_temporal_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
"""

#: runs a command as a user would (output thrown away) from a small process: prints [wall seconds, peak RSS
#: of its largest process in kB (the kernel's accounting of the waited-for processes), peak PSS of all of
#: them in kB, sampled every 20 ms where the second argument is "sample", else 0 and no sampling: the
#: sampler reads each process's smaps_rollup, ~3 ms of CPU per sample, ~13 % of a core the command lacks
#: (hpcprof's 2 x 72 MB run on 2 cores 0.77 -> 0.81 s sampled), and polls at 20 ms]
#: the whole-process runner: tree_pss_kb (below) is put in front of it as its own source text
WHOLE_RUNNER_BODY = r"""
argv, sample = json.loads(sys.argv[1]), sys.argv[2] == "sample"
peak = 0
t0 = time.perf_counter()
proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while sample and proc.poll() is None:
    peak = max(peak, tree_pss_kb(proc.pid))
    time.sleep(0.02)
proc.wait()
wall = time.perf_counter() - t0
if proc.returncode != 0:
    sys.exit(f"{argv[:3]} failed ({proc.returncode})")
print(json.dumps([wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, peak]))
"""

FLOOR_DRIVER = r"""
import json, pathlib, sys, time
import msgspec
from hpcprof.tools.torch.analysis.schema import Event
from hpcprof.tools.torch.analysis.stream import INFLATE, read_chunks  # hpcprof's inflate (multi-member)
class Doc(msgspec.Struct):
    traceEvents: list[Event] = []
decode = msgspec.json.Decoder(Doc).decode
files = sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.name.endswith((".json", ".json.gz")))
times = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    for path in files:
        data = b"".join(read_chunks(path, 64 << 20))
        decode(data)
        del data
    times.append(time.perf_counter() - t0)
json.dump({"floor_s": min(times), "inflate": INFLATE.__name__}, open(sys.argv[2], "w"))
"""


def tree_pss_kb(pid: int) -> int:
    """Proportional set size of a process and all its descendants (shared pages counted once)."""
    total, stack = 0, [pid]
    while stack:
        proc = stack.pop()
        try:
            with open(f"/proc/{proc}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{proc}/task"):
                with open(f"/proc/{proc}/task/{task}/children") as f:
                    stack += map(int, f.read().split())
        except (OSError, StopIteration):
            continue
    return total


def whole_runner() -> str:
    """The runner's program: the imports, this module's tree_pss_kb, then WHOLE_RUNNER_BODY."""
    import inspect

    return "import json, os, resource, subprocess, sys, time\n" + inspect.getsource(tree_pss_kb) + WHOLE_RUNNER_BODY


def run_sampled(argv: list[str], log: Path) -> int:
    """Run `argv`, sampling its process tree's PSS every 20 ms; the peak in kB."""
    peak = 0
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=REPO)
        while proc.poll() is None:
            peak = max(peak, tree_pss_kb(proc.pid))
            time.sleep(0.02)
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed; see {log}")
    return peak


def whole_processes(traces: Path, hta_python: str, repeat: int) -> dict[str, list[tuple[float, int, int]]]:
    """Each tool's whole process on `traces`: one round with its process tree's PSS sampled (the
    memory), then `repeat` rounds unsampled (the wall times, as a user waits), the tools alternated,
    each run started by a fresh small process (whole_runner: its RUSAGE_CHILDREN peak is that run's,
    and no forked copy of this one counts). Per tool: the sampled run, then the timed ones."""
    script = Path(sys.executable).with_name("hpcprof")
    hpcprof = [str(script)] if script.exists() else [sys.executable, "-m", "hpcprof"]
    commands = {"hta": [hta_python, "-c", HTA_WHOLE, str(traces)],
                "hpcprof": [*hpcprof, "trace", "all", str(traces), "--format", "csv"]}
    runs: dict[str, list[tuple[float, int, int]]] = {k: [] for k in commands}
    for mode in ["sample"] + ["time"] * repeat:
        for key, argv in commands.items():
            out = subprocess.run([sys.executable, "-c", whole_runner(), json.dumps(argv), mode], capture_output=True,
                                 text=True, check=True, cwd=REPO).stdout
            wall, rss, pss = json.loads(out)
            runs[key].append((wall, rss, pss))
    return runs


def scale_trace(src: Path, dst: Path, copies: int) -> None:
    """Write `src`'s events `copies` times, each copy shifted past the previous one."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    once = [e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"]
    timed = [e for e in events if not (e.get("ph") == "M" or e.get("cat") == "Trace")]
    start = min(e["ts"] for e in timed)
    period = math.ceil(max(e["ts"] + (e.get("dur") or 0) for e in timed) - start) + 1000
    corr_span = 1 + max(
        max(e.get("args", {}).get("correlation", 0), e.get("args", {}).get("External id", 0))
        for e in timed)
    steps = [int(e["name"].split("#")[1]) for e in timed
             if e.get("name", "").startswith("ProfilerStep#")]
    step_span = max(steps) - min(steps) + 1
    with gzip.open(dst, "wt", compresslevel=1) as out:
        out.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        out.write(",\n".join(map(json.dumps, once)))
        for i in range(copies):
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
                out.write(",\n" + json.dumps(c))
        out.write("\n]}\n")


def run(python: str, driver: str, trace_dir: Path, result: Path, repeat: int) -> dict[str, Any]:
    """Run a driver in a subprocess and return what it measured, with its tree's peak PSS."""
    tree_kb = run_sampled([python, "-c", driver, str(trace_dir), str(result), str(repeat)],
                          result.with_suffix(".log"))
    out = json.loads(result.read_text())
    out["tree_kb"] = tree_kb
    out["tables"] = {k: pd.read_json(io.StringIO(v), orient="split")
                     for k, v in out.get("tables", {}).items()}
    return out


def compare(hta: dict[str, pd.DataFrame], ours: dict[str, pd.DataFrame]) -> list[str]:
    """Check every number HTA reports against hpcprof's; one line per table."""
    hta = dict(hta)
    hta["kernel_types"] = hta["kernel_types"][hta["kernel_types"]["sum"] > 0]
    hta["launch"] = hta["launch"][["rank", *hta["launch"].columns.drop("rank")]]
    columns = {  # hpcprof's per-kernel max/min/mean/stddev deliberately differ (see docstring)
        "kernels": ["name", "sum (us)", "kernel_type", "rank"],
        "launch": list(hta["launch"].columns),
    }
    lines = []
    for name, theirs in hta.items():
        cols = columns.get(name, list(theirs.columns))
        mine = ours[name][cols].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, theirs[cols].reset_index(drop=True),
                                      check_dtype=False, rtol=1e-9)
        lines.append(f"  {name:<13} {len(mine):>7} rows x {len(cols)} columns: identical")
    return lines


def scaled(source: Path, target_mb: float, workdir: Path) -> Path:
    """The directory of `source`'s traces scaled to about `target_mb` MB of JSON each (made once)."""
    files = sorted(source.glob("*.json.gz"))
    size = max(len(gzip.decompress(p.read_bytes())) for p in files)
    copies = max(1, round(target_mb * 1e6 / size))
    traces = workdir / f"{source.name}_x{copies}"
    traces.mkdir(parents=True, exist_ok=True)
    for src in files:
        if not (traces / src.name).exists():
            scale_trace(src, traces / src.name, copies)
    return traces


def json_mb(traces: Path) -> str:
    """The sizes of the traces in `traces`, as JSON text."""
    return " + ".join(f"{len(gzip.decompress(p.read_bytes())) / 1e6:.1f}" for p in sorted(traces.glob("*.json.gz"))) \
        + " MB of JSON"


def bench(source: Path, target_mb: float, hta_python: str, workdir: Path, repeat: int) -> None:
    """Scale `source`'s traces to about `target_mb` MB each, run both tools, print the report."""
    traces = scaled(source, target_mb, workdir)
    copies = int(traces.name.rsplit("_x", 1)[1])

    runs: dict[str, list[dict[str, Any]]] = {"hta": [], "ours": []}
    for _ in range(repeat):  # alternated, so that both see the same load on a shared machine
        runs["hta"].append(run(hta_python, HTA_DRIVER, traces, workdir / f"{source.name}_hta.json", 1))
        runs["ours"].append(run(sys.executable, HPCPROF_DRIVER, traces,
                                workdir / f"{source.name}_hpcprof.json", 1))
    hta, ours = ({**min(r, key=lambda x: x["load_s"] + x["analyses_s"]),
                  **{k: r[0][k] for k in ("peak_kb", "base_kb", "tree_kb")}} for r in runs.values())

    print(f"== fixture hta/{source.name}, its events repeated {copies}x, in {traces}")
    for p in sorted(traces.glob("*.json.gz")):
        raw = len(gzip.decompress(p.read_bytes()))
        print(f"  {p.name}: {raw / 1e6:.1f} MB JSON ({p.stat().st_size / 1e6:.1f} MB gzip)")
    print("same numbers (every value HTA returns, 1e-9 relative; per-kernel statistics other")
    print("than the sum differ by design, see hpcprof.tools.torch.analysis.analyses.kernel_breakdown):")
    print("\n".join(compare(hta["tables"], ours["tables"])))
    floor = run(sys.executable, FLOOR_DRIVER, traces, workdir / f"{source.name}_floor.json", repeat)
    print(f"  {'':10} {'load s':>7} {'analyses s':>11} {'total s':>8} {'peak RSS MiB':>13} "
          f"{'after imports':>14} {'peak - imports':>15} {'all processes':>14}")
    for label, r in (("HTA 0.5.0", hta), ("hpcprof", ours)):
        total = r["load_s"] + r["analyses_s"]
        print(f"  {label:10} {r['load_s']:7.2f} {r['analyses_s']:11.2f} {total:8.2f} "
              f"{r['peak_kb'] / 1024:13.0f} {r['base_kb'] / 1024:14.0f} "
              f"{(r['peak_kb'] - r['base_kb']) / 1024:15.0f} {r['tree_kb'] / 1024:14.0f}")
    print(f"  (times: the fastest of {repeat} alternated runs; memory: the first run's. peak RSS: the main")
    print("  process's VmHWM; all processes: the peak PSS of the process and its workers, sampled every")
    print(f"  20 ms, shared pages counted once. hpcprof inflates gzip with {floor['inflate']})")
    ours_s = ours["load_s"] + ours["analyses_s"]
    ratio = (hta["load_s"] + hta["analyses_s"]) / ours_s
    memory = ours["tree_kb"] / hta["tree_kb"]
    need = (ours["peak_kb"] - ours["base_kb"]) / (hta["peak_kb"] - hta["base_kb"])
    print(f"  speed-up, load + five analyses: {ratio:.1f}x (goal >= 20x: {'met' if ratio >= 20 else 'missed'})")
    print(f"  memory, all processes: {memory:.2f} of HTA's (goal <= 0.20: {'met' if memory <= 0.2 else 'missed'}); "
          f"main process above its imports: {need:.2f} of HTA's")
    print(f"  floor (read + inflate + msgspec decode of the fields used, whole files, one process): "
          f"{floor['floor_s']:.2f} s; "
          f"hpcprof's load + analyses = {ours_s / floor['floor_s']:.2f}x the floor")
    whole = whole_processes(traces, hta_python, repeat)
    wall = {k: statistics.median(r[0] for r in v[1:]) for k, v in whole.items()}
    rss = {k: max(r[1] for r in v) for k, v in whole.items()}
    pss = {k: v[0][2] for k, v in whole.items()}
    speed, largest, summed = wall["hta"] / wall["hpcprof"], rss["hpcprof"] / rss["hta"], pss["hpcprof"] / pss["hta"]
    print(f"  as a user waits (whole processes, imports included; median of {repeat} alternated runs, unsampled; "
          f"all processes' PSS from one sampled round before them; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}): `hpcprof trace all --format csv` {wall['hpcprof']:.2f} s, "
          f"largest process {rss['hpcprof'] / 1024:.0f} MiB, all processes {pss['hpcprof'] / 1024:.0f} MiB; HTA 0.5.0's "
          f"load and five analyses {wall['hta']:.2f} s, {rss['hta'] / 1024:.0f} MiB, {pss['hta'] / 1024:.0f} MiB")
    print(f"  goal 5: {speed:.1f}x HTA's speed as a user waits (goal >= 20x: {'met' if speed >= 20 else 'missed'}; "
          f"in process above: {ratio:.1f}x); memory {largest:.2f} of HTA's largest process and {summed:.2f} of all its "
          f"processes (goal <= 0.20: {'met' if max(largest, summed) <= 0.2 else 'missed'}; in process above: {memory:.2f})")
    cores = run(sys.executable, CORES_DRIVER, traces, workdir / f"{source.name}_cores.json", repeat)
    hta_s = hta["load_s"] + hta["analyses_s"]
    print(f"  on more cores than files ({os.cpu_count()} cores): hpcprof collect's map of these files (the five "
          "analyses, window, critical-path events, written as bundles), and the load of `hpcprof trace critical-path`")
    for label in ("collect, one core per file", "collect, all cores"):
        print(f"    {label:<30} {cores[label]:6.2f} s  {hta_s / cores[label]:5.1f}x HTA's load + analyses")
    if "critical-path skipped" in cores:
        print(f"    critical-path: not timed ({cores['critical-path skipped']})")
        return
    one = cores["critical-path, one process"]
    for label in ("critical-path, one process", "critical-path, all cores"):
        print(f"    {label:<30} {cores[label]:6.2f} s  {one / cores[label]:5.1f}x one process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target-mb", type=float, default=25,
                        help="size of each scaled trace file (uncompressed JSON)")
    parser.add_argument("--fixtures", nargs="+", default=["trace_filter", "ns_resolution_trace"],
                        help="folders under shared/fixtures/hta to scale up")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per tool; the fastest is reported (the machine may be shared)")
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "hpcprof-trace-speed")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "hpcprof")], check=True,
                   stdout=subprocess.DEVNULL)            # bytecode, as an install leaves it
    for name in args.fixtures:
        bench(FIXTURES / name, args.target_mb, args.hta_python, args.workdir, args.repeat)


if __name__ == "__main__":
    main()
