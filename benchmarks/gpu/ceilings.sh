#!/bin/bash
# Issue 48 item 2 on 2 GPUs: `hpcprof bench ceilings` against NVIDIA nccl-tests at the same sizes.
# Builds nccl-tests (source carried, git-ignored, in .gpu/nccl-tests: NVIDIA/nccl-tests) against the NCCL of
# the pip nvidia-nccl wheel torch uses (MPI=1 with the machine's Open MPI: 2 processes, one GPU each, as
# hpcprof's ranks; else MPI=0, one process driving both), runs all_gather_perf, reduce_scatter_perf and
# all_reduce_perf and hpcprof bench ceilings under torchrun --nproc-per-node 2
# at the same sizes, iterations and warm-up, each way launched one by one and from a CUDA graph, nccl-tests
# with 5 cycles (-N 5) as hpcprof takes the best of 5 runs (the best of all is each side's ceiling): the default sweep (1 MiB .. 256 MiB x4, float32) and seqpar's
# default all-gather/reduce-scatter (S=4608 x H=9216 bfloat16 = 84934656 B). Compared on busbw: AG and RS
# with nccl-tests' out-of-place column (torch's all_gather_into_tensor/reduce_scatter_tensor are), AR
# with its in-place one (dist.all_reduce is). Writes OUT/ceilings.txt (table, `within 5 %: yes/no`),
# OUT/ceilings.json (hpcprof's), OUT/nccl_<op>.txt (nccl-tests'), OUT/ceilings.log.
# Needs .gpu/whl (hpcprof's wheels, as e2e_hpcprof.sh). Usage: bash benchmarks/gpu/ceilings.sh OUT
set -u
OUT_DIR=${1:?output directory}
ITERS=${ITERS:-50}
WARMUP=${WARMUP:-5}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/nccl/lib
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
if ls .gpu/whl*/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .gpu/whl*/*.whl)
fi
export PYTHONPATH=/tmp/site:$REPO
SEQPAR_BYTES=$((4608 * 9216 * 2))
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  # the NCCL of torch's pip wheel (nvidia-nccl-cu12: nvidia/nccl/{include,lib}; cu13 wheels may nest it
  # deeper, so looked for under every nvidia namespace path); nccl-tests links -lnccl: libnccl.so
  NVIDIA_DIRS=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))')
  NCCL_H=$(find $NVIDIA_DIRS -name nccl.h | head -n 1)
  NCCL_SO=$(find $NVIDIA_DIRS -name 'libnccl.so*' | head -n 1)
  echo "NCCL: $NCCL_H $NCCL_SO"
  [ -n "$NCCL_H" ] && [ -n "$NCCL_SO" ] || { echo "no nccl.h/libnccl.so in the nvidia wheels ($NVIDIA_DIRS)"; exit 1; }
  ln -sfn "$(dirname "$NCCL_H")" /tmp/nccl/include
  ln -sf "$NCCL_SO" /tmp/nccl/lib/libnccl.so
  ln -sf "$NCCL_SO" "/tmp/nccl/lib/$(basename "$NCCL_SO")"
  export LD_LIBRARY_PATH=/tmp/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  rm -rf /tmp/nccl-tests && cp -r .gpu/nccl-tests /tmp/nccl-tests
  # two processes, one GPU each (MPI=1, mpirun -np 2 -g 1), as torchrun runs hpcprof's ranks; without an MPI
  # compiler, one process driving both GPUs (MPI=0, -g 2), which NCCL serves with other means (e.g. copy engines)
  if command -v mpicc >/dev/null; then
    mkdir -p /tmp/mpi   # MPI_HOME/include and /lib as nccl-tests' Makefile wants them, from Open MPI's wrapper
    ln -sfn "$(mpicc --showme:incdirs | cut -d' ' -f1)" /tmp/mpi/include
    ln -sfn "$(mpicc --showme:libdirs | cut -d' ' -f1)" /tmp/mpi/lib
    BUILD=(MPI=1 MPI_HOME=/tmp/mpi); LAUNCH=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE
      -x LD_LIBRARY_PATH); GPUS=1
  else
    BUILD=(MPI=0); LAUNCH=(); GPUS=2
  fi
  echo "nccl-tests: ${BUILD[*]} ${LAUNCH[*]} -g $GPUS"
  make -C /tmp/nccl-tests/src -j 16 "${BUILD[@]}" NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nccl-tests/build >/dev/null || exit 1
  # launched one by one and replayed from a CUDA graph (-G 10: ten launches of the graph of ITERS calls, so
  # that its upload, which nccl-tests times with the first launch, weighs as little as in hpcprof's, which
  # launches once untimed first), on cudaMalloc buffers, on ncclMemAlloc ones
  # registered with NCCL (-R 1, nccl_<op>_registered.txt) and registered as symmetric windows (-R 2,
  # nccl_<op>_symmetric.txt): the best of the six is compared
  for op in all_gather reduce_scatter all_reduce; do
    for reg in 0 1 2; do
      suffix=([0]="" [1]=_registered [2]=_symmetric)
      file="$OUT_DIR/nccl_${op}${suffix[$reg]}.txt"
      rm -f "$file"
      for graph in 0 1; do
        "${LAUNCH[@]}" /tmp/nccl-tests/build/${op}_perf -g $GPUS -b 1M -e 256M -f 4 -d float -w "$WARMUP" \
          -n "$ITERS" -N 5 -c 0 -G $((graph * 10)) -R $reg >> "$file"
        [ "$op" = all_reduce ] || "${LAUNCH[@]}" /tmp/nccl-tests/build/${op}_perf -g $GPUS -b $SEQPAR_BYTES \
          -e $SEQPAR_BYTES -d bfloat16 -w "$WARMUP" -n "$ITERS" -N 5 -c 0 -G $((graph * 10)) -R $reg >> "$file"
      done
    done
  done
  [ -n "${NCCL_TESTS_ONLY:-}" ] && exit 0
  args=()
  for op in all_gather reduce_scatter all_reduce; do
    for bytes in 1M 4M 16M 64M 256M; do args+=(--collective "$op:$bytes:float32"); done
  done
  args+=(--collective all_gather:$SEQPAR_BYTES:bfloat16 --collective reduce_scatter:$SEQPAR_BYTES:bfloat16)
  python3 -m torch.distributed.run --nproc-per-node 2 --no-python python3 -m hpcprof bench ceilings "${args[@]}" \
    --gemm 8192,8192,8192:bfloat16 --gemm 4608,4608,9216:bfloat16 --gemm 4608,9216,4608:bfloat16 \
    --iters "$ITERS" --warmup "$WARMUP" --out "$OUT_DIR/ceilings.json"
} > "$OUT_DIR/ceilings.log" 2>&1 || { tail -n 30 "$OUT_DIR/ceilings.log"; exit 1; }
python3 "$REPO/benchmarks/gpu/ceilings_compare.py" "$OUT_DIR" | tee "$OUT_DIR/ceilings.txt"
