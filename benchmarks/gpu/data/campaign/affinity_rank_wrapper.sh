#!/bin/bash
# ---- hpcprof rank wrapper for run 20261122-102149-21e2c6: resolve this rank, pick the profiler, exec.
# Rank variables are tried launcher-specific first and SLURM_* last: under mpiexec inside a
# Slurm job every rank inherits SLURM_PROCID=0.
hp_first() {
  local name
  for name in "$@"; do
    if [ -n "${!name:-}" ]; then printf '%s' "${!name}"; return; fi
  done
  printf '0'
}
hp_rank=$(hp_first PALS_RANKID OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID RANK)
hp_local_rank=$(hp_first PALS_LOCAL_RANKID OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID PMI_LOCAL_RANK SLURM_LOCALID LOCAL_RANK)
export HPCPROF_RUN_DIR=/tmp/campaign/affinity/20261122-102149-21e2c6
export HPCPROF_RANK="$hp_rank" HPCPROF_LOCAL_RANK="$hp_local_rank"
export CUDA_VISIBLE_DEVICES=$(( 4 - 1 - hp_local_rank % 4 ))
exec > >(tee -a "$HPCPROF_RUN_DIR/logs/rank${hp_rank}.log") 2>&1

export HPCPROF_PROFILE_TOOL=none
exec "$@"
