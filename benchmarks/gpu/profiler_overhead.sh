#!/bin/bash
# The profilers' cost on 2 GPUs, per option set: a nanoGPT-style GPT (overhead/minigpt.py, a
# `command` timed by the step hook), the ddp harness and seqpar (their own timers), each unprofiled
# (profile.tool: none) and under each option set below, with the sets alternated inside each round;
# then overhead/summarize.py's table: the unprofiled and profiled median step (mean over runs), the
# slowdown with its 95 % Welch interval over the runs, and for a `command` the slowdown hpcprof
# states (torch.profiler: the run's own unprofiled steps; nsys: the job's unprofiled reference,
# profile.reference: start-up + 15 steps). No collect (nsys: no export): the step times are read
# from the runs' files. Order, most wanted first, each part only while the budget lasts:
#   1. REPS rounds of none, nsys, torch on minigpt and ddp;
#   2. REPS rounds of the optional sets (EXTRA) on minigpt and ddp (their baseline: part 1's none);
#   3. REPS rounds of none, nsys, torch on seqpar.
# Every set is first checked with `submit --dry-run` (a set that fails it is left out, its error logged).
# It stops starting runs after BUDGET_S seconds of runs (default 330; a run is cut at 90 s), so the
# whole fits 10 minutes (in the first run ddp's three sets took 50 s a round; minigpt's not timed).
#   bash benchmarks/gpu/profiler_overhead.sh [OUT] [REPS]      (OUT default $OUT; REPS default 3)
#   WORKLOADS=minigpt EXTRA=" " BUDGET_S=170 bash ... 2      (the GPT alone under none, nsys, torch)
#   EXTRA="nsys.osrt torch.shapes.stack nsys.noevent nsys.sample" BUDGET_S=450 bash ...   (more sets)
# Needs what env.sh needs (.gpu/whl, .gpu/libs carried); site-h200x2.yaml (mpiexec, 2 GPUs).
set -u
OUT_DIR=${1:-${OUT:?output directory}}
REPS=${2:-3}
BUDGET_S=${BUDGET_S:-330}
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR"
WORKDIR=/tmp/overhead-runs
SITE=$REPO/benchmarks/gpu/site-h200x2.yaml
# option set name (a part of the run's name: letters, digits, _.-) -> --set overrides; the
# defaults are hpcprof's, each costly option opt-in
declare -A SETS=(
  [none]="profile.tool=none"
  [nsys]="profile.tool=nsys"
  [nsys.osrt]="profile.tool=nsys profile.nsys.trace=[cuda,nvtx,osrt]"
  [nsys.noevent]="profile.tool=nsys profile.nsys.cuda_event_trace=false"
  [nsys.sample]="profile.tool=nsys profile.nsys.sample=process-tree profile.nsys.cpuctxsw=process-tree"
  [torch]="profile.tool=torch"
  [torch.shapes.stack]="profile.tool=torch profile.torch.record_shapes=true profile.torch.with_stack=true"
)
read -r -a EXTRA <<< "${EXTRA:-nsys.osrt torch.shapes.stack}"
# the workloads of parts 1 and 2 (WORKLOADS=minigpt: the GPT alone, and no seqpar)
WORKLOADS=${WORKLOADS:-minigpt ddp}
SPENT=0

# overrides SET: the --set arguments of option set SET (in the array ARGS)
overrides() {
  ARGS=()
  local kv
  for kv in ${SETS[$1]}; do ARGS+=(--set "$kv"); done
}

# one REP WORKLOAD SET: one run, unless the budget is spent
one() {
  if (( SPENT )) || (( $(date +%s) - START > BUDGET_S )); then
    (( SPENT )) || echo "budget of ${BUDGET_S}s spent: no more runs"
    SPENT=1
    return
  fi
  overrides "$3"
  local t0 rc
  t0=$(date +%s)
  timeout 90 python3 -m hpcprof submit "benchmarks/gpu/overhead/$2.yaml" --site-file "$SITE" \
    --workdir "$WORKDIR" --set "name=overhead-$2--$3" "${ARGS[@]}" --wait > /dev/null 2>&1
  rc=$?
  echo "round $1 $2 $3: rc $rc in $(( $(date +%s) - t0 ))s"
}

# rounds WORKLOADS SETS: REPS rounds, each every workload under every set in turn
rounds() {
  local -a workloads sets
  read -r -a workloads <<< "$1"
  read -r -a sets <<< "$2"
  local rep workload set
  for rep in $(seq "$REPS"); do
    for workload in "${workloads[@]}"; do
      for set in "${sets[@]}"; do one "$rep" "$workload" "$set"; done
    done
  done
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nsys --version
  valid=()
  for set in none nsys torch "${EXTRA[@]}"; do
    if [[ -z ${SETS[$set]+x} ]]; then echo "option set $set: unknown (one of: ${!SETS[*]})"; continue; fi
    overrides "$set"
    if error=$(python3 -m hpcprof submit benchmarks/gpu/overhead/minigpt.yaml --site-file "$SITE" \
        --workdir "$WORKDIR" --set "name=overhead-minigpt--$set" "${ARGS[@]}" --dry-run 2>&1 >/dev/null); then
      valid+=("$set")
    else
      echo "option set $set: left out, submit --dry-run refused it: $(grep -m1 '^Error' <<< "$error")"
    fi
  done
  echo "option sets: ${valid[*]}"
  START=$(date +%s)
  base=() extra=()
  for set in "${valid[@]}"; do
    case $set in none|nsys|torch) base+=("$set") ;; *) extra+=("$set") ;; esac
  done
  rounds "$WORKLOADS" "${base[*]}"
  (( ${#extra[@]} )) && rounds "$WORKLOADS" "${extra[*]}"
  [[ " $WORKLOADS " == *" ddp "* ]] && rounds "seqpar" "${base[*]}"
  echo "runs took $(( $(date +%s) - START ))s"
} > "$OUT_DIR/profiler_overhead.log" 2>&1
python3 benchmarks/gpu/overhead/summarize.py "$WORKDIR" | tee "$OUT_DIR/profiler_overhead_gpu.txt"
tar -C "$WORKDIR" -czf "$OUT_DIR/overhead-runs.tar.gz" --exclude='profiles' --exclude='tmp' .
tail -n 5 "$OUT_DIR/profiler_overhead.log"
