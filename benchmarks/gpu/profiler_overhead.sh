#!/bin/bash
# The profilers' cost on 2 GPUs, per option set: a nanoGPT-style GPT (overhead/minigpt.py, a
# `command` timed by the step hook), seqpar and the ddp harness (their own timers), each unprofiled
# (profile.tool: none) and under each option set below, REPS rounds with the sets alternated inside
# each round; then overhead/summarize.py's table: the unprofiled and profiled median step (mean
# over runs), the slowdown with its 95 % Welch interval over the runs, and for torch.profiler the
# slowdown hpcprof states from the run's own unprofiled steps. No collect (nsys: no export): the
# step times are read from the runs' files. Under nsys each minigpt job also runs hpcprof's unprofiled
# reference first (profile.reference: start-up + 15 steps), the baseline of the "stated %" column.
# It stops starting runs after BUDGET_S seconds.
#   bash benchmarks/gpu/profiler_overhead.sh [OUT] [REPS]      (OUT default $OUT; REPS default 3)
# Needs what env.sh needs (.gpu/whl, .gpu/libs carried); site-h200x2.yaml (mpiexec, 2 GPUs).
set -u
OUT_DIR=${1:-${OUT:?output directory}}
REPS=${2:-3}
BUDGET_S=${BUDGET_S:-420}
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR"
WORKDIR=/tmp/overhead-runs
SITE=$REPO/benchmarks/gpu/site-h200x2.yaml
# option set name -> --set overrides (the defaults are hpcprof's; each costly option opt-in)
declare -A SETS=(
  [none]="profile.tool=none"
  [nsys]="profile.tool=nsys"
  [nsys+osrt]="profile.tool=nsys profile.nsys.trace=[cuda,nvtx,osrt]"
  [nsys-event]="profile.tool=nsys profile.nsys.cuda_event_trace=false"
  [nsys+sample]="profile.tool=nsys profile.nsys.sample=process-tree profile.nsys.cpuctxsw=process-tree"
  [torch]="profile.tool=torch"
  [torch+shapes+stack]="profile.tool=torch profile.torch.record_shapes=true profile.torch.with_stack=true"
)
# the sets run, in order, each round (SETS_RUN: more of SETS, e.g. "none nsys nsys-event nsys+sample")
read -r -a ORDER <<< "${SETS_RUN:-none nsys torch nsys+osrt torch+shapes+stack}"
START=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nsys --version
  for rep in $(seq "$REPS"); do
    for workload in minigpt seqpar ddp; do
      for set in "${ORDER[@]}"; do
        if (( $(date +%s) - START > BUDGET_S )); then echo "budget of ${BUDGET_S}s spent: no more runs"; break 3; fi
        args=()
        for kv in ${SETS[$set]}; do args+=(--set "$kv"); done
        t0=$(date +%s)
        timeout 120 python3 -m hpcprof submit "benchmarks/gpu/overhead/$workload.yaml" --site-file "$SITE" \
          --workdir "$WORKDIR" --set "name=overhead-$workload--$set" "${args[@]}" --wait > /dev/null 2>&1
        echo "round $rep $workload $set: rc $? in $(( $(date +%s) - t0 ))s"
      done
    done
  done
} > "$OUT_DIR/profiler_overhead.log" 2>&1
python3 benchmarks/gpu/overhead/summarize.py "$WORKDIR" | tee "$OUT_DIR/profiler_overhead_gpu.txt"
tar -C "$WORKDIR" -czf "$OUT_DIR/overhead-runs.tar.gz" --exclude='profiles' --exclude='tmp' .
tail -n 5 "$OUT_DIR/profiler_overhead.log"
