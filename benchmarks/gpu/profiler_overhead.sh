#!/bin/bash
# The profilers' cost on 2 GPUs, per workload and option set: public trainers run unchanged as
# `command` workloads timed by the step hook (overhead/minigpt.py: a nanoGPT-style GPT;
# overhead/hf_trainer.py: a Hugging Face `Trainer` script; overhead/lightning_ddp.py: a Lightning
# DDP script; the last two under torchrun), and seqpar and the ddp harness (their own timers). Each
# round runs every workload under `none` and every option set in turn (alternated), REPS rounds;
# then overhead/summarize.py's table: the unprofiled and profiled median step (mean over runs), the
# slowdown with its 95 % Welch interval over the runs. No collect (nsys: no export) and no
# unprofiled reference run (profile.reference: false): the step times are read from the runs' files.
# Every set is first checked with `submit --dry-run` (a set that fails it is left out, its error
# logged). It stops starting runs after BUDGET_S seconds of runs (a run is cut at RUN_S seconds),
# so a call fits the device's 10 minutes; what ran is summarized either way.
# VERDICT_SETS (e.g. "nsys torch"): after the rounds, one run per workload and set as a user runs it,
# with the profiler's own unprofiled baseline (profile.reference left at its default: on under nsys;
# torch.profiler's steps outside its window), collected and reported: overhead/verdicts.py's table of
# the step and the limiter as measured and re-based on the unprofiled step (OUT/verdicts.txt).
#   bash benchmarks/gpu/profiler_overhead.sh [OUT] [REPS]          (OUT default $OUT; REPS default 3)
#   WORKLOADS="minigpt hf" OPTION_SETS="nsys.osrt torch.shapes" bash ...  (the costly options, one at a time)
#   VERDICT_SETS="nsys torch" bash ... OUT 0                       (the verdicts alone, no rounds)
# Needs what env.sh needs (.gpu/whl, .gpu/libs carried). SITE_MPI / SITE_TORCHRUN / SET_ARGS (extra
# --set overrides, ';'-separated per workload as WORKLOAD:KEY=VALUE) let it run on a CPU site.
set -u
OUT_DIR=${1:-${OUT:?output directory}}
REPS=${2:-3}
BUDGET_S=${BUDGET_S:-480}
RUN_S=${RUN_S:-120}
if [[ -z ${NO_ENV:-} ]]; then source benchmarks/gpu/env.sh; else REPO=$(pwd); fi
mkdir -p "$OUT_DIR"
WORKDIR=${WORKDIR:-/tmp/overhead-runs}
SITE_MPI=${SITE_MPI:-$REPO/benchmarks/gpu/site-h200x2.yaml}
SITE_TORCHRUN=${SITE_TORCHRUN:-$REPO/benchmarks/gpu/site-torchrun-x2.yaml}
# option set name (a part of the run's name: letters, digits, _.-) -> --set overrides; `none` is the
# unobserved program (no profiler, no stack sampler), `none.sampler` the step hook's stack sampler
# alone; `nsys` and `torch` are hpcprof's defaults, every other set one option changed from them
declare -A SETS=(
  [none]="profile.tool=none profile.window.stack_sample_ms=0"
  [none.sampler]="profile.tool=none"
  [none.memory]="profile.tool=none profile.memory=true"
  [nsys]="profile.tool=nsys"
  [nsys.nosampler]="profile.tool=nsys profile.window.stack_sample_ms=0"
  [nsys.nsysdefaults]="profile.tool=nsys profile.nsys.sample=null profile.nsys.cpuctxsw=null"
  [nsys.event]="profile.tool=nsys profile.nsys.cuda_event_trace=true"
  [nsys.noevent]="profile.tool=nsys profile.nsys.cuda_event_trace=false"
  [nsys.sample]="profile.tool=nsys profile.nsys.sample=process-tree profile.nsys.cpuctxsw=process-tree"
  [nsys.cpuctxsw]="profile.tool=nsys profile.nsys.cpuctxsw=process-tree"
  [nsys.osrt]="profile.tool=nsys profile.nsys.trace=[cuda,nvtx,osrt]"
  [nsys.cudaonly]="profile.tool=nsys profile.nsys.trace=[cuda]"
  [nsys.nonccl]="profile.tool=nsys profile.nsys.extra_args=[--nvtx-domain-exclude=NCCL]"
  [torch]="profile.tool=torch"
  [torch.shapes]="profile.tool=torch profile.torch.record_shapes=true"
  [torch.stack]="profile.tool=torch profile.torch.with_stack=true"
  [torch.memory]="profile.tool=torch profile.torch.profile_memory=true"
)
# workload -> its experiment file (benchmarks/gpu/overhead/) and site
declare -A SITE=([minigpt]=$SITE_MPI [seqpar]=$SITE_MPI [ddp]=$SITE_MPI [hf]=$SITE_TORCHRUN [lightning]=$SITE_TORCHRUN)
read -r -a WORKLOAD_LIST <<< "${WORKLOADS:-minigpt hf lightning seqpar ddp}"
read -r -a SET_LIST <<< "${OPTION_SETS:-nsys torch}"
SPENT=0
# the workloads ask for 2 ranks; a machine lent with one GPU runs them on one
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}

# overrides WORKLOAD SET [PREFIX]: the --set arguments of option set SET and of SET_ARGS for WORKLOAD
# (in ARGS); a round's run (PREFIX overhead) has no unprofiled reference run, a verdict's has the default
overrides() {
  ARGS=()
  [[ ${3:-overhead} == overhead ]] && ARGS+=(--set profile.reference=false)
  if (( NGPU < 2 )); then
    ARGS+=(--set resources.ranks_per_node=1)
    [[ $1 == ddp ]] && ARGS+=(--set workload.args.world_size=1)   # Echo's local_config.json asks for 2
  fi
  local kv
  for kv in ${SETS[$2]}; do ARGS+=(--set "$kv"); done
  local -a extra
  IFS=';' read -r -a extra <<< "${SET_ARGS:-}"
  for kv in "${extra[@]}"; do [[ $kv == "$1:"* ]] && ARGS+=(--set "${kv#"$1:"}"); done
}

# one REP WORKLOAD SET [PREFIX]: one run of experiment PREFIX-WORKLOAD--SET (PREFIX: overhead, a
# round's; verdict), unless the budget is spent
one() {
  if (( SPENT )) || (( $(date +%s) - START > BUDGET_S )); then
    (( SPENT )) || echo "budget of ${BUDGET_S}s spent: no more runs"
    SPENT=1
    return
  fi
  local prefix=${4:-overhead}
  overrides "$2" "$3" "$prefix"
  local t0 rc
  t0=$(date +%s)
  # the run's end is its DONE file, polled every 0.2 s (submit --wait backs off to 10 s polls)
  local runs=$WORKDIR/$prefix-$2--$3 before
  before=$(compgen -G "$runs/*/DONE" | wc -l)
  python3 -m hpcprof submit "benchmarks/gpu/overhead/$2.yaml" --site-file "${SITE[$2]}" \
    --workdir "$WORKDIR" --set "name=$prefix-$2--$3" "${ARGS[@]}" > /dev/null 2>&1
  rc=$?
  while (( rc == 0 && $(compgen -G "$runs/*/DONE" | wc -l) == before )); do
    if (( $(date +%s) - t0 > RUN_S )); then
      python3 -m hpcprof cancel --workdir "$WORKDIR" "$(ls -td "$runs"/*/ | head -1)" > /dev/null 2>&1
      rc=124
      break
    fi
    sleep 0.2
  done
  echo "$prefix $1 $2 $3: rc $rc, $(grep -h '^exit_code=' "$(ls -td "$runs"/*/ | head -1)status" 2>/dev/null) in $(( $(date +%s) - t0 ))s"
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import transformers, lightning; print("transformers", transformers.__version__, "lightning", lightning.__version__)'
  nsys --version && nsys profile --help | grep -A4 -e '--cuda-event-trace=' -e '--sample=' | head -20
  valid=(none)
  for set in "${SET_LIST[@]}"; do
    if [[ -z ${SETS[$set]+x} ]]; then echo "option set $set: unknown (one of: ${!SETS[*]})"; continue; fi
    overrides "${WORKLOAD_LIST[0]}" "$set"
    if error=$(python3 -m hpcprof submit "benchmarks/gpu/overhead/${WORKLOAD_LIST[0]}.yaml" \
        --site-file "${SITE[${WORKLOAD_LIST[0]}]}" --workdir "$WORKDIR" \
        --set "name=overhead-${WORKLOAD_LIST[0]}--$set" "${ARGS[@]}" --dry-run 2>&1 >/dev/null); then
      valid+=("$set")
    else
      echo "option set $set: left out, submit --dry-run refused it: $(grep -m1 '^Error' <<< "$error")"
    fi
  done
  echo "option sets: ${valid[*]}; workloads: ${WORKLOAD_LIST[*]}; GPUs: $NGPU"
  START=$(date +%s)
  for rep in $(seq "$REPS"); do
    for workload in "${WORKLOAD_LIST[@]}"; do
      for set in "${valid[@]}"; do one "$rep" "$workload" "$set"; done
    done
  done
  read -r -a VERDICT_LIST <<< "${VERDICT_SETS:-}"
  for workload in "${WORKLOAD_LIST[@]}"; do
    for set in "${VERDICT_LIST[@]}"; do
      one 1 "$workload" "$set" verdict
      run=$(ls -td "$WORKDIR/verdict-$workload--$set"/*/ 2>/dev/null | head -1)
      [[ -n $run ]] && python3 -m hpcprof collect --workdir "$WORKDIR" "$run" > /dev/null 2>&1
    done
  done
  echo "runs took $(( $(date +%s) - START ))s"
} > "$OUT_DIR/profiler_overhead.log" 2>&1
python3 benchmarks/gpu/overhead/summarize.py "$WORKDIR" | tee "$OUT_DIR/profiler_overhead_gpu.txt"
tar -C "$WORKDIR" -czf "$OUT_DIR/overhead-runs.tar.gz" --exclude='profiles' --exclude='tmp' .
tail -n 5 "$OUT_DIR/profiler_overhead.log"
if [[ -n ${VERDICT_SETS:-} ]]; then
  python3 benchmarks/gpu/overhead/verdicts.py "$WORKDIR" | tee "$OUT_DIR/verdicts.txt"
fi
