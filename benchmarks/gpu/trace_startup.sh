#!/bin/bash
# The whole-process speed goal on a many-core host: where `hpcprof trace all` of the 2 x 72 MB h200_ddp_gpt2 case spends the time a
# user waits, beyond its in-process load and analyses (on a 16-CPU H200 host the whole process took 0.75 s where those
# took 0.29 s: benchmarks/results/nsys_stats_speed_gpu_host.txt). One device call, no GPU used:
#
#   bash benchmarks/gpu/trace_startup.sh $OUT      (carry .gpu/whl .gpu/isal, made by goals45.sh pack and
#                                                  `pip download isal` for Python 3.12 into .gpu/isal)
#
# It installs hpcprof's missing dependencies (goals45.sh setup .gpu/whl), builds the case (benchmarks/trace_speed.py's
# scaled), then alternates ROUNDS times: `python3 -c pass`, numpy's import, the trace lane's imports, and `python3 -m
# hpcprof trace all DIR --format csv` with the default workers, --workers 2 and --workers 1, without and with ISA-L
# (isal) on the path, all with OPENBLAS_NUM_THREADS=1 (as hpcprof's `trace` commands set it for themselves); then one
# in-process timeline of the default run (imports, load, analyses and output) and `-X importtime`'s largest imports.
set -u
OUT=${1:?output folder}
ROUNDS=${ROUNDS:-7}
mkdir -p "$OUT" /tmp/isal
bash benchmarks/gpu/goals45.sh setup .gpu/whl > /dev/null || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/isal .gpu/isal/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
python3 -m compileall -q hpcprof /tmp/site /tmp/isal > /dev/null
CASE=$(python3 - <<'EOF'
import sys
from pathlib import Path
sys.path[:0] = ["benchmarks", "tests"]
from fixture_files import materialize
from trace_speed import scaled
print(scaled(materialize(Path(".fixtures")) / "hta" / "h200_ddp_gpt2", 72, Path("/tmp/trace-startup")))
EOF
) || exit 1
{
  echo "# $(date -u +%FT%TZ): $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 -c 'import sys, numpy, msgspec; print("# Python", sys.version.split()[0], "numpy", numpy.__version__, "msgspec", msgspec.__version__)'
  echo "# case: $CASE ($(du -sh "$CASE" | cut -f1) gzip); $ROUNDS alternated rounds, wall seconds (median, min, max)"
  python3 - "$CASE" "$ROUNDS" <<'EOF'
import os, statistics, subprocess, sys, time
case, rounds = sys.argv[1], int(sys.argv[2])
base = os.environ["PYTHONPATH"]
with_isal = f"/tmp/isal:{base}"
quiet = {"OPENBLAS_NUM_THREADS": "1"}     # as hpcprof's `trace` commands set for themselves (hpcprof.__main__)
trace = [sys.executable, "-m", "hpcprof", "trace", "all", case, "--format", "csv"]
commands = {
    "python3 -c pass": ([sys.executable, "-c", "pass"], base),
    "numpy's import alone": ([sys.executable, "-c", "import numpy"], base),
    "imports of the trace lane": ([sys.executable, "-c", "import hpcprof.tools.torch.analysis.cli, numpy, msgspec"], base),
    "trace all (default workers), zlib": (trace, base),
    "trace all (default workers), isal": (trace, with_isal),
    "trace all --workers 2, zlib": (trace + ["--workers", "2"], base),
    "trace all --workers 2, isal": (trace + ["--workers", "2"], with_isal),
    "trace all --workers 1, isal": (trace + ["--workers", "1"], with_isal),
}
times = {k: [] for k in commands}
for _ in range(rounds):
    for key, (argv, path) in commands.items():
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path, **quiet})
        times[key].append(time.perf_counter() - t)
for key, ts in times.items():
    print(f"  {key:38s} {statistics.median(ts):6.3f}  {min(ts):6.3f}  {max(ts):6.3f}")
EOF
  echo "# one default run (isal) in process: seconds since its first line"
  PYTHONPATH=/tmp/isal:$PYTHONPATH OPENBLAS_NUM_THREADS=1 python3 - "$CASE" <<'EOF'
import sys, time
t0 = time.perf_counter()
marks = []
def mark(what):
    marks.append((time.perf_counter() - t0, time.process_time(), what))
import hpcprof.tools.torch.analysis.cli as cli
import hpcprof.tools.torch.analysis.load as load
mark("imports (the trace command's modules)")
orig = load.map_traces
def map_traces(*a, **k):
    mark("map_traces starts")
    r = orig(*a, **k)
    mark("map_traces done (the files loaded)")
    return r
load.map_traces = map_traces
from hpcprof.cli import main
import contextlib, io
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["trace", "all", sys.argv[1], "--format", "csv"])
mark("analyses and CSV done")
for t, c, what in marks:
    print(f"  {t:6.3f} s  (CPU {c:6.3f} s)  {what}")
EOF
  echo "# python3 -X importtime -m hpcprof trace all (isal): the 12 largest cumulative imports, microseconds"
  PYTHONPATH=/tmp/isal:$PYTHONPATH python3 -X importtime -m hpcprof trace all "$CASE" --format csv 2>&1 >/dev/null \
    | grep 'import time:' | awk -F'|' '{print $2 "|" $3}' | sort -n -r | head -12
} 2>&1 | tee "$OUT/trace_startup.log"
