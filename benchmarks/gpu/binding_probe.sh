#!/bin/bash
# Where a rank's threads run on the lent GPU machine, and what that does to the profilers' cost:
# the machine's CPUs and cgroup quota, the CPU set an mpiexec rank gets under the GPU sites (Open
# MPI's default binding) and under --bind-to none, then profiler_overhead.sh's minigpt under none,
# nsys and torch on each, alternated (REPS rounds each).
#   bash benchmarks/gpu/binding_probe.sh OUT [REPS]
set -u
OUT_DIR=${1:?output directory}
REPS=${2:-2}
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR"
NOBIND=/tmp/site-nobind.yaml
sed 's/extra_args: \[--allow-run-as-root, --oversubscribe\]/extra_args: [--allow-run-as-root, --oversubscribe, --bind-to, none]/' \
  benchmarks/gpu/site-h200x2.yaml > "$NOBIND"
{
  nproc; grep -m1 'model name' /proc/cpuinfo; cat /sys/fs/cgroup/cpu.max 2>/dev/null; cat /sys/fs/cgroup/cpu.stat 2>/dev/null
  nvidia-smi topo -m 2>/dev/null | head -4
  probe='import os; print("rank", os.environ.get("OMPI_COMM_WORLD_RANK"), "cpus", sorted(os.sched_getaffinity(0)))'
  echo "default binding:"; mpiexec --allow-run-as-root --oversubscribe -n 2 python3 -c "$probe"
  echo "--bind-to none:"; mpiexec --allow-run-as-root --oversubscribe --bind-to none -n 2 python3 -c "$probe"
  uptime
} > "$OUT_DIR/binding.txt" 2>&1
cat "$OUT_DIR/binding.txt"
for site in default nobind; do
  s=$REPO/benchmarks/gpu/site-h200x2.yaml; [ "$site" = nobind ] && s=$NOBIND
  NO_ENV=1 WORKDIR=/tmp/binding-$site SITE_MPI=$s WORKLOADS=minigpt OPTION_SETS="nsys torch" BUDGET_S=${BUDGET_S:-200} \
    bash benchmarks/gpu/profiler_overhead.sh "$OUT_DIR/$site" "$REPS" > /dev/null 2>&1
  echo "== $site"; cat "$OUT_DIR/$site/profiler_overhead_gpu.txt"; rm -f "$OUT_DIR/$site/overhead-runs.tar.gz"
  grep -h "round" "$OUT_DIR/$site/profiler_overhead.log" | head -3
done
cat /sys/fs/cgroup/cpu.stat 2>/dev/null
