#!/bin/bash
# Per-rank profiler wrapper for the GPU benchmarks, with the logic of hpcprof's rank wrapper
# template: resolve the rank, run the selected ranks under $TOOL, name each report by its rank.
#   env: TOOL=nsys|ncu|torch|none  TAG=<report prefix>  PROFILE_DIR=<dir>  PROFILE_RANKS="all"|"0 2"
#        NSYS, NCU (binaries), NSYS_ARGS, NCU_ARGS (word-split options)
first() {
  local name
  for name in "$@"; do
    if [ -n "${!name:-}" ]; then printf '%s' "${!name}"; return; fi
  done
  printf '0'
}
rank=$(first HPCPROF_RANK PALS_RANKID OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID RANK)
local_rank=$(first HPCPROF_LOCAL_RANK PALS_LOCAL_RANKID OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID PMI_LOCAL_RANK SLURM_LOCALID LOCAL_RANK)
export HPCPROF_RANK="$rank" HPCPROF_LOCAL_RANK="$local_rank"
if [ "${TOOL:-none}" != none ] && { [ "${PROFILE_RANKS:-all}" = all ] || [[ " $PROFILE_RANKS " == *" $rank "* ]]; }; then
  export HPCPROF_PROFILE_TOOL="$TOOL" HPCPROF_PROFILE_DIR="$PROFILE_DIR"
  mkdir -p "$PROFILE_DIR"
  echo "rank $rank (local $local_rank) runs under $TOOL: $PROFILE_DIR/${TAG}_rank${rank}" >&2
  case "$TOOL" in
    # shellcheck disable=SC2086  # the *_ARGS are option lists
    nsys) exec "$NSYS" profile $NSYS_ARGS -o "$PROFILE_DIR/${TAG}_rank${rank}" "$@" ;;
    ncu) exec "$NCU" $NCU_ARGS -o "$PROFILE_DIR/${TAG}_rank${rank}" "$@" ;;
    torch) exec "$@" ;;  # the workload writes $PROFILE_DIR/rank<N>.pt.trace.json[.gz]
    *) echo "rank_wrapper: unknown TOOL=$TOOL" >&2; exit 2 ;;
  esac
fi
export HPCPROF_PROFILE_TOOL=none
exec "$@"
