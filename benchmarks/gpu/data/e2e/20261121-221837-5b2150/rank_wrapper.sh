#!/bin/bash
# ---- hpcprof rank wrapper for run 20261121-221837-5b2150: resolve this rank, pick the profiler, exec.
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
export HPCPROF_RUN_DIR=/tmp/hpcprof-runs/seqpar-polaris/20261121-221837-5b2150
export HPCPROF_RANK="$hp_rank" HPCPROF_LOCAL_RANK="$hp_local_rank"
export CUDA_VISIBLE_DEVICES=$(( hp_local_rank % 2 ))
exec > >(tee -a "$HPCPROF_RUN_DIR/logs/rank${hp_rank}.log") 2>&1

# ---- profiled ranks: '[0]'
if { case " 0 " in *" $hp_rank "*) true ;; *) false ;; esac; }; then
  export HPCPROF_PROFILE_TOOL=ncu
  export HPCPROF_PROFILE_DIR="$HPCPROF_RUN_DIR/profiles/ncu"
  mkdir -p "$HPCPROF_PROFILE_DIR"
  echo "hpcprof: rank $hp_rank (local $hp_local_rank) on $(hostname) runs under ncu"
  exec ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --kernel-name 'regex:gemm|nvjet|xmma|cutlass' --launch-skip 4 --launch-count 4 -f -o "$HPCPROF_PROFILE_DIR/rank${hp_rank}" "$@"
fi
export HPCPROF_PROFILE_TOOL=none
exec "$@"
