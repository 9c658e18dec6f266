#!/bin/bash
# Start N ranks of a command through rank_wrapper.sh: N=1 directly on GPU 0; N>1 with torchrun
# (default) or mpiexec (LAUNCHER=mpiexec; Open MPI gets -x for the variables the ranks need).
#   bash benchmarks/gpu/launch.sh N python3 -m hpcprof.workloads.seqpar ...
here=$(cd "$(dirname "$0")" && pwd)
n=$1
shift
if [ "$n" = 1 ]; then
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec bash "$here/rank_wrapper.sh" "$@"
fi
if [ "${LAUNCHER:-torchrun}" = mpiexec ]; then
  forward=()
  if mpiexec --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
    forward=(--allow-run-as-root --oversubscribe)
    for var in PYTHONPATH LD_LIBRARY_PATH PATH TOOL TAG PROFILE_DIR PROFILE_RANKS NSYS NCU NSYS_ARGS NCU_ARGS \
      NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS PYTHONUNBUFFERED OMP_NUM_THREADS \
      HPCPROF_RUN_DIR HPCPROF_TORCH_GZIP HPCPROF_TORCH_SCHEDULE GPT2_PRESET GPT2_BATCHES; do
      [ -n "${!var+x}" ] && forward+=(-x "$var")
    done
  fi
  exec mpiexec "${forward[@]}" -n "$n" bash "$here/rank_wrapper.sh" "$@"
fi
exec "${PY:-python3}" -m torch.distributed.run --standalone --nproc-per-node "$n" --no-python bash "$here/rank_wrapper.sh" "$@"
