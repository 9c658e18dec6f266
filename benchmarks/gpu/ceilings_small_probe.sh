#!/bin/bash
# Why hpcprof bench ceilings finds 4-17 % more bus bandwidth than nccl-tests at 1-16 MiB on 2 GPUs
# (results/ceilings.txt) while the two agree within 1 % from 64 MiB. At 1, 4 and 16 MiB, float32, 50 calls,
# 5 warm-up, the best of 5 runs, one by one on ncclMemAlloc buffers, unregistered (-R 0), each of:
#   A  nccl-tests under mpirun as ceilings.sh runs it (Open MPI's default binding: each rank to one core);
#   B  the same with mpirun --bind-to none (no binding, as torchrun);
#   C  the same as A with -I 1 (a CUDA event recorded per call; its host-timed busbw is compared);
#   D  hpcprof bench ceilings under torchrun (as ceilings.sh);
#   E  hpcprof bench ceilings under mpirun (Open MPI's default binding);
#   F  NCCL_DEBUG=INFO (INIT, TUNING) of one 16 MiB all-reduce on each side: channels, algorithm, protocol;
#   G  nccl-tests with each size alone (-b S -e S: its buffers, allocated and registered once at the largest
#      size of a run, then of that size, as hpcprof's), -R 0 and -R 2 (symmetric windows), -G 0 and -G 10.
# SECTIONS (default ABCDEFG) picks some. Writes OUT/probe.log (every output) and OUT/{D,E}.json.
# Usage: [SECTIONS=DG] bash benchmarks/gpu/ceilings_small_probe.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO
NT=(-g 1 -b 1M -e 16M -f 4 -d float -w 5 -n 50 -N 5 -c 0 -G 0 -R 0)
COLLS=()
for op in all_gather reduce_scatter all_reduce; do
  for bytes in 1M 4M 16M; do COLLS+=(--collective "$op:$bytes:float32"); done
done
{
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m
  nproc; python3 -c 'import os; print("affinity", sorted(os.sched_getaffinity(0)))'
  source benchmarks/gpu/nccl_tests_build.sh
  SECTIONS=${SECTIONS:-ABCDEFG}
  for op in all_gather reduce_scatter all_reduce; do
    [[ $SECTIONS == *A* ]] || continue
    echo "== A $op (mpirun default binding)"
    "${LAUNCH[@]}" --report-bindings /tmp/nccl-tests/build/${op}_perf "${NT[@]}"
    [[ $SECTIONS == *B* ]] && echo "== B $op (mpirun --bind-to none)"
    [[ $SECTIONS == *B* ]] && "${LAUNCH[@]}" --bind-to none /tmp/nccl-tests/build/${op}_perf "${NT[@]}"
    [[ $SECTIONS == *C* ]] && echo "== C $op (-I 1: CUDA events per call)"
    [[ $SECTIONS == *C* ]] && "${LAUNCH[@]}" /tmp/nccl-tests/build/${op}_perf "${NT[@]}" -I 1
  done
  for op in all_gather reduce_scatter all_reduce; do
    [[ $SECTIONS == *G* ]] || continue
    for bytes in 1M 4M 16M; do
      for reg in 0 2; do
        for graph in 0 10; do
          echo "== G $op $bytes -R $reg -G $graph"
          "${LAUNCH[@]}" /tmp/nccl-tests/build/${op}_perf -g 1 -b $bytes -e $bytes -d float -w 5 -n 50 -N 5 -c 0 \
            -G $graph -R $reg
        done
      done
    done
  done
  [[ $SECTIONS == *D* ]] && echo "== D hpcprof under torchrun" &&
  timeout -s KILL 240 python3 -m torch.distributed.run --nproc-per-node 2 --no-python python3 -m hpcprof bench ceilings \
    "${COLLS[@]}" --iters 50 --warmup 5 --out "$OUT_DIR/D.json"
  [[ $SECTIONS == *E* ]] && echo "== E hpcprof under mpirun (default binding)" &&
  timeout -s KILL 240 "${LAUNCH[@]}" --report-bindings -x PYTHONPATH -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
    -x NVSHMEM_DISABLE_NVLS -x PYTHONUNBUFFERED python3 -m hpcprof bench ceilings "${COLLS[@]}" --iters 50 --warmup 5 \
    --out "$OUT_DIR/E.json"
  [[ $SECTIONS == *F* ]] && echo "== F nccl-tests NCCL_DEBUG, 16 MiB all-reduce" &&
  "${LAUNCH[@]}" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV /tmp/nccl-tests/build/all_reduce_perf -g 1 \
    -b 16M -e 16M -d float -w 1 -n 2 -N 1 -c 0 2>&1 | grep -v -E "^#|^$" | head -n 80
  [[ $SECTIONS == *F* ]] && echo "== F hpcprof NCCL_DEBUG, 16 MiB all-reduce" &&
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV timeout -s KILL 120 python3 -m torch.distributed.run \
    --nproc-per-node 2 --no-python python3 -m hpcprof bench ceilings --collective all_reduce:16M:float32 --iters 2 \
    --warmup 1 --out /tmp/F.json 2>&1 | head -n 120
} > "$OUT_DIR/probe.log" 2>&1
grep -E "^==|^ +[0-9]+ +[0-9]+ +float|busbw|GB/s" "$OUT_DIR/probe.log" | head -n 120
