#!/bin/bash
# `hpcprof collect` over many cores of one GPU machine (16-32 cores; no GPU used).
# Generated run: N rank exports (hard links of the H200 seqpar fixtures, 442 kB each) collected with
# 1, 2, 4, 8, 16 worker processes (`--workers N`), then with mpi4py.futures over Open MPI
# (WORKERS overrides the list; `mpiexec -n W+1 python -m mpi4py.futures`: W MPI workers for each W of
# MPI_WORKERS, default 3,7,15).
# Prints per mode wall time, ms per file, the phases of the collect (wall), speed-up over 1 worker and
# parallel efficiency (speed-up / workers); goal >= 0.7 at 16 workers.
# No network: hpcprof's dependencies come from the carried (git-ignored) .gpu/whl wheels, as the other
# benchmarks/gpu scripts; the machine's python3 has numpy, pandas, pyarrow, mpi4py (Open MPI).
# Then, with SCALE (sizes, e.g. 1024,4096,16384), N ranks with every core (16 workers): wall time and the collecting
# process's peak memory per N (flat in N?); sizes up to SERIAL_MAX (default 0) also with 1 worker (the speed-up at that N). Runs in about 3-4 minutes (N=2048; 1 worker takes the longest), plus
# ~2 minutes for SCALE up to 16,384. Usage: bash benchmarks/gpu/collect_cores.sh OUT [N] [SCALE]
# Expected: OUT/collect_cores.txt with the tables and `met`/`missed` goal lines; the device and versions first.
set -u
OUT_DIR=${1:?output directory}
N=${2:-2048}
SCALE=${3:-}
MPI_WORKERS=${MPI_WORKERS:-3,7,15}
WORKERS=${WORKERS:-1,2,4,8,16}
REPO=$(pwd)
mkdir -p "$OUT_DIR"
source benchmarks/gpu/collect_env.sh
export PYTHONPATH=$PYTHONPATH:$REPO
{
  echo "# $(date -u +%FT%TZ) $(hostname): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  lscpu | grep -E "^Model name|^Socket|^Core|^Thread" | sed 's/^/# /'
  python3 -c 'import sys, pandas, pyarrow; from mpi4py import MPI; print("# python", sys.version.split()[0], "pandas", pandas.__version__, "pyarrow", pyarrow.__version__, "|", MPI.Get_library_version().replace(chr(0), "").splitlines()[0])'
  echo "# hpcprof $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)"
  python3 benchmarks/collect_file.py --repeat "${REPEAT:-30}"
  python3 benchmarks/collect_scale.py --sizes "$N" --serial-max "$N" --workers-list "$WORKERS" \
    --mpi-n "$N" --mpi-workers "$MPI_WORKERS" --cross-sizes ''
  [ -z "$SCALE" ] || python3 benchmarks/collect_scale.py --sizes "$SCALE" --serial-max "${SERIAL_MAX:-0}" --workers-list "1,$(nproc)" \
    --mpi-n 0 --cross-sizes ''
} 2>&1 | tee "$OUT_DIR/collect_cores.txt"
