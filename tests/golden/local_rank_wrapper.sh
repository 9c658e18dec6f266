#!/bin/bash
# ---- hpcprof rank wrapper for run 20250101-120000-abc123: resolve this rank, pick the profiler, exec.
# Rank variables are tried launcher-specific first and SLURM_* last: under mpiexec inside a
# Slurm job every rank inherits SLURM_PROCID=0.
hp_first() {
  local name
  for name in "$@"; do
    if [ -n "${!name:-}" ]; then printf '%s' "${!name}"; return 0; fi
  done
  echo "hpcprof: no rank variable set (tried $*): start this wrapper through the site's launcher" >&2
  return 1
}
hp_profiled=1
# the unprofiled reference (profile.reference) comes with --hpcprof-reference first: no profiler, the step hook ends it
if [ "${1:-}" = --hpcprof-reference ]; then shift; hp_profiled=0; export HPCPROF_STEPS_REFERENCE=1; fi
hp_rank=$(hp_first PALS_RANKID OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID RANK) || exit 2
hp_local_rank=$(hp_first PALS_LOCAL_RANKID OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID PMI_LOCAL_RANK SLURM_LOCALID LOCAL_RANK) || exit 2
export HPCPROF_RUN_DIR=/tmp/hpcprof-runs/seqpar-like/20250101-120000-abc123
export HPCPROF_RANK="$hp_rank" HPCPROF_LOCAL_RANK="$hp_local_rank"
# ---- torch.distributed's env:// variables, each only where unset (torchrun sets its own): hpcprof.render.rank_env
[ -n "${RANK:-}" ] || export RANK="$hp_rank"
[ -n "${LOCAL_RANK:-}" ] || export LOCAL_RANK="$hp_local_rank"
[ -n "${WORLD_SIZE:-}" ] || export WORLD_SIZE=2
[ -n "${LOCAL_WORLD_SIZE:-}" ] || export LOCAL_WORLD_SIZE=2
[ -n "${MASTER_ADDR:-}" ] || export MASTER_ADDR=127.0.0.1
[ -n "${MASTER_PORT:-}" ] || export MASTER_PORT=26588
# ---- forensics (experiment forensics:): hpcprof's start-up hook first on PYTHONPATH; each variable only where unset
export PYTHONPATH=/tmp/hpcprof-runs/seqpar-like/20250101-120000-abc123/inject${PYTHONPATH:+:$PYTHONPATH}
hp_unset() { [ -z "${!1+set}" ]; }
hp_unset HPCPROF_FORENSICS && export HPCPROF_FORENSICS=1
hp_unset HPCPROF_FORENSICS_POLL && export HPCPROF_FORENSICS_POLL=1
hp_unset HPCPROF_FORENSICS_WAIT && export HPCPROF_FORENSICS_WAIT=2.5
hp_unset TORCH_FR_BUFFER_SIZE && export TORCH_FR_BUFFER_SIZE=2000
hp_unset TORCH_FR_DUMP_TEMP_FILE && export TORCH_FR_DUMP_TEMP_FILE=/tmp/hpcprof-runs/seqpar-like/20250101-120000-abc123/forensics/fr_nccl_rank
hp_unset TORCH_NCCL_DUMP_ON_TIMEOUT && export TORCH_NCCL_DUMP_ON_TIMEOUT=1
# ---- optimizer steps (profile.window.auto): hpcprof's start-up hook marks and times them
export HPCPROF_STEPS=1
export HPCPROF_STEPS_SKIP=5
export HPCPROF_STEPS_COUNT=10
export HPCPROF_STEPS_DRIVE=1
export HPCPROF_SAMPLE_MS=5
exec > >(tee -a "$HPCPROF_RUN_DIR/logs/rank${hp_rank}.log") 2>&1

# ---- profiled ranks: all
if [ "$hp_profiled" = 1 ] && true; then
  export HPCPROF_PROFILE_TOOL=nsys
  export HPCPROF_PROFILE_DIR="$HPCPROF_RUN_DIR/profiles/nsys"
  mkdir -p "$HPCPROF_PROFILE_DIR"
  echo "hpcprof: rank $hp_rank (local $hp_local_rank) on $(hostname) runs under nsys"
  exec nsys profile --trace=cuda,nvtx --capture-range=none --stats=true --sample=none --cpuctxsw=none --export=sqlite --force-overwrite=true -o "$HPCPROF_PROFILE_DIR/rank${hp_rank}" "$@"
fi
export HPCPROF_PROFILE_TOOL=none
exec "$@"
