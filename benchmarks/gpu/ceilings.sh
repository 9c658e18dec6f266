#!/bin/bash
# On 2 GPUs: `hpcprof bench ceilings` against NVIDIA nccl-tests at the same sizes.
# Builds nccl-tests (nccl_tests_build.sh: against the NCCL torch uses; 2 processes, one GPU each, as hpcprof's
# ranks, where Open MPI is), runs all_gather_perf, reduce_scatter_perf and all_reduce_perf, each size in a run of
# its own, and hpcprof bench ceilings under torchrun --nproc-per-node 2 at the same sizes, iterations and warm-up:
# each way launched one by one and from a CUDA graph, nccl-tests with 5 cycles (-N 5) as hpcprof takes the best of
# 5 runs (the best of all is each side's ceiling): 1 MiB .. 256 MiB x4, float32, and seqpar's default
# all-gather/reduce-scatter (S=4608 x H=9216 bfloat16 = 84934656 B). Compared on busbw: AG and RS with
# nccl-tests' out-of-place column (torch's all_gather_into_tensor/reduce_scatter_tensor are), AR with its
# in-place one (dist.all_reduce is). Writes OUT/ceilings.txt (table, `within 5 %: yes/no`), OUT/ceilings.json
# (hpcprof's), OUT/nccl_<op>.txt (nccl-tests'), OUT/ceilings.log.
# Needs .gpu/whl (hpcprof's wheels, as e2e_hpcprof.sh). Usage: bash benchmarks/gpu/ceilings.sh OUT
set -u
OUT_DIR=${1:?output directory}
ITERS=${ITERS:-50}
WARMUP=${WARMUP:-5}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
if ls .gpu/whl*/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .gpu/whl*/*.whl)
fi
export PYTHONPATH=/tmp/site:$REPO
SEQPAR_BYTES=$((4608 * 9216 * 2))
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  source benchmarks/gpu/nccl_tests_build.sh
  # each size in a run of its own (-b S -e S): nccl-tests allocates and registers its buffers once, at the largest
  # size of a run, and a sweep's small sizes on buffers and windows of 256 MiB ran up to 18 % slower than alone
  # (results/ceilings_small_probe.txt); hpcprof's buffers are the collective's size. Launched one by one and
  # replayed from a CUDA graph (-G 10: ten launches of the graph of ITERS calls, as hpcprof's GRAPH_LAUNCHES), on
  # ncclMemAlloc buffers (nccl-tests' allocator with NCCL >= 2.19), unregistered (-R 0), registered with NCCL
  # (-R 1, nccl_<op>_registered.txt) and registered as symmetric windows (-R 2, nccl_<op>_symmetric.txt): the
  # best of the six is compared
  for op in all_gather reduce_scatter all_reduce; do
    sizes=("1M float" "4M float" "16M float" "64M float" "256M float")
    [ "$op" = all_reduce ] || sizes+=("$SEQPAR_BYTES bfloat16")
    for reg in 0 1 2; do
      suffix=([0]="" [1]=_registered [2]=_symmetric)
      file="$OUT_DIR/nccl_${op}${suffix[$reg]}.txt"
      rm -f "$file"
      for graph in 0 1; do
        for size in "${sizes[@]}"; do
          read -r bytes dtype <<< "$size"
          "${LAUNCH[@]}" /tmp/nccl-tests/build/${op}_perf -g $GPUS -b "$bytes" -e "$bytes" -d "$dtype" -w "$WARMUP" \
            -n "$ITERS" -N 5 -c 0 -G $((graph * 10)) -R $reg >> "$file"
        done
      done
    done
  done
  [ -n "${NCCL_TESTS_ONLY:-}" ] && exit 0
  args=()
  for op in all_gather reduce_scatter all_reduce; do
    for bytes in 1M 4M 16M 64M 256M; do args+=(--collective "$op:$bytes:float32"); done
  done
  args+=(--collective all_gather:$SEQPAR_BYTES:bfloat16 --collective reduce_scatter:$SEQPAR_BYTES:bfloat16)
  timeout -s KILL 300 python3 -m torch.distributed.run --nproc-per-node 2 --no-python python3 -m hpcprof bench ceilings \
    "${args[@]}" \
    --gemm 8192,8192,8192:bfloat16 --gemm 4608,4608,9216:bfloat16 --gemm 4608,9216,4608:bfloat16 \
    --iters "$ITERS" --warmup "$WARMUP" --out "$OUT_DIR/ceilings.json"
} > "$OUT_DIR/ceilings.log" 2>&1 || { tail -n 30 "$OUT_DIR/ceilings.log"; exit 1; }
python3 "$REPO/benchmarks/gpu/ceilings_compare.py" "$OUT_DIR" | tee "$OUT_DIR/ceilings.txt"
