#!/bin/bash
# The first GPU campaign: seqpar on 1 and 2 GPUs (fp32, bf16) unprofiled, under nsys on every rank,
# under ncu on one rank (GEMM kernels, launch-skip/count), the per-phase capture mode, the slowdown
# of unprofiled ranks, DDP (Echo GPT-2) under nsys with the window, and standalone matmul and
# collective loops of the same shapes. Run from the repository root:
#   bash benchmarks/gpu/run_all.sh RESULTS_DIR "env seqpar standalone mpi repeat nsys slowdown ncu ddp ddpextra capture torch"
# Each step has a time limit, cut to what is left of BUDGET seconds; later steps are then skipped. Reports are turned
# into CSV here (nsys stats, ncu --import --csv), where the tools are.
set -u
RES=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
STEPS=${2:-env seqpar standalone mpi repeat nsys slowdown ncu ddp ddpextra capture torch}
REPO=$(pwd)
HERE=$REPO/benchmarks/gpu
mkdir -p "$RES"/{seqpar,standalone,nsys,ncu,ddp,logs}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
export PY=${PY:-python3}
[ -d "$REPO/.gpu/libs" ] && export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=${NSYS:-$(command -v nsys || ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
NCU=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
export NSYS NCU
NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())')
GPU_COUNTS="1"
[ "$NGPU" -ge 2 ] && GPU_COUNTS="1 2"
S=${S:-4608} H=${H:-9216} IT=${IT:-100} WIT=${WIT:-20}
BUDGET=${BUDGET:-540}
SEQPAR=("$PY" -m hpcprof.workloads.seqpar -s "$S" -d "$H")
NSYS_BASE="--sample=none --cpuctxsw=none --trace=cuda,nvtx --force-overwrite=true"
NCU_BASE="--target-processes all --nvtx -f --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"

wants() { [[ " $STEPS " == *" $1 "* ]]; }

# step NAME LIMIT_S CMD...: run with a time limit, log to logs/NAME.log, record rc and seconds.
step() {
  local name=$1 limit=$2
  shift 2
  if [ "$SECONDS" -ge "$BUDGET" ]; then
    echo "$name skipped (budget)" | tee -a "$RES/logs/steps.txt"
    return
  fi
  local start=$SECONDS
  [ "$limit" -gt "$((BUDGET - SECONDS))" ] && limit=$((BUDGET - SECONDS))
  timeout "$limit" "$@" >"$RES/logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$RES/logs/steps.txt"
  [ "$rc" = 0 ] || tail -n 15 "$RES/logs/$name.log"
}

# nsys_stats REPORT...: kernel, NVTX and NVTX-on-GPU summaries as CSV (also exports REPORT.sqlite).
nsys_stats() {
  local rep
  for rep in "$@"; do
    [ -f "$rep" ] || continue
    timeout 120 "$NSYS" stats --force-export=true --format csv --output "${rep%.nsys-rep}" \
      --report cuda_gpu_kern_sum --report nvtx_sum --report nvtx_gpu_proj_sum "$rep" >>"$RES/logs/nsys_stats.log" 2>&1
    echo "nsys stats $(basename "$rep") rc=$?" >>"$RES/logs/steps.txt"
  done
}

if wants env; then
  {
    date -u
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
    nvidia-smi topo -m
    $PY -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "cudnn", torch.backends.cudnn.version())'
    $PY -c 'from mpi4py import MPI; print("mpi4py MPI:", MPI.Get_library_version().replace(chr(0), "").splitlines()[0])' 2>&1 | tail -1
    command -v mpiexec && mpiexec --version 2>&1 | head -2
    echo "nsys: $NSYS"; "$NSYS" --version
    echo "ncu: $NCU"; "$NCU" --version | tail -1
  } >"$RES/env.txt" 2>&1
  cat "$RES/env.txt"
fi

if wants seqpar; then
  for p in $GPU_COUNTS; do
    for prec in float32 bfloat16; do
      step "base_${prec}_p$p" 150 bash "$HERE/launch.sh" "$p" "${SEQPAR[@]}" -p "$prec" -it "$IT" -wit "$WIT" --check \
        --results-dir "$RES/seqpar/base_${prec}_p$p"
    done
  done
  if [ "$NGPU" -ge 2 ]; then
    step base2_bfloat16_p2 120 bash "$HERE/launch.sh" 2 "${SEQPAR[@]}" -p bfloat16 -it "$IT" -wit "$WIT" \
      --results-dir "$RES/seqpar/base2_bfloat16_p2"
  fi
fi

if wants standalone; then
  step standalone_matmul 150 env CUDA_VISIBLE_DEVICES=0 "$PY" "$HERE/standalone_matmul.py" -s "$S" -d "$H" --order blocked \
    --ranks "${GPU_COUNTS// /,}" -it "$IT" -wit "$WIT" --out "$RES/standalone/matmul.json"
  [ "$NGPU" -ge 2 ] && step standalone_collective_p2 120 bash "$HERE/launch.sh" 2 "$PY" "$HERE/standalone_collective.py" \
    -s "$S" -d "$H" -it "$IT" -wit "$WIT" --out "$RES/standalone/collective_p2.json"
fi

if wants mpi && [ "$NGPU" -ge 2 ] && command -v mpiexec >/dev/null; then
  step mpi_seqpar_bfloat16_p2 120 env LAUNCHER=mpiexec bash "$HERE/launch.sh" 2 "${SEQPAR[@]}" -p bfloat16 -it "$IT" \
    -wit "$WIT" --check --results-dir "$RES/seqpar/mpi_bfloat16_p2"
  step mpi_ddp_p2 180 env LAUNCHER=mpiexec GPT2_PRESET=gpt2 bash "$HERE/launch.sh" 2 "$PY" -m hpcprof.workloads.ddp \
    --echo-input "$REPO/examples/echo_gpt2" --world-size 2 --batchsize 8 --epochs 2 --warmup-epochs 1 \
    --steps-per-epoch 12 --results-dir "$RES/ddp/mpi_p2"
fi

if wants repeat; then
  # Run-to-run spread: seqpar and the standalone matmuls (both orders) again, alternately.
  for trial in 1 2; do
    for prec in bfloat16 float32; do
      step "repeat${trial}_${prec}_p1" 120 bash "$HERE/launch.sh" 1 "${SEQPAR[@]}" -p "$prec" -it "$IT" -wit "$WIT" \
        --results-dir "$RES/seqpar/repeat${trial}_${prec}_p1"
    done
    for order in interleaved blocked; do
      step "matmul_${order}_$trial" 150 env CUDA_VISIBLE_DEVICES=0 "$PY" "$HERE/standalone_matmul.py" -s "$S" -d "$H" \
        --ranks "${GPU_COUNTS// /,}" -it "$IT" -wit "$WIT" --order "$order" --out "$RES/standalone/matmul_${order}_$trial.json"
    done
  done
fi

if wants nsys; then
  for p in $GPU_COUNTS; do
    for prec in float32 bfloat16; do
      step "nsys_${prec}_p$p" 180 env TOOL=nsys TAG="seqpar_${prec}_p$p" PROFILE_DIR="$RES/nsys" NSYS_ARGS="$NSYS_BASE" \
        bash "$HERE/launch.sh" "$p" "${SEQPAR[@]}" -p "$prec" -it "$IT" -wit "$WIT" \
        --results-dir "$RES/seqpar/nsys_${prec}_p$p"
      nsys_stats "$RES/nsys/seqpar_${prec}_p${p}"_rank*.nsys-rep
    done
  done
fi

if wants slowdown && [ "$NGPU" -ge 2 ]; then
  step slowdown_bfloat16_p2 150 env TOOL=nsys PROFILE_RANKS=0 TAG=slowdown_bfloat16_p2 PROFILE_DIR="$RES/nsys" \
    NSYS_ARGS="$NSYS_BASE" bash "$HERE/launch.sh" 2 "${SEQPAR[@]}" -p bfloat16 -it "$IT" -wit "$WIT" \
    --results-dir "$RES/seqpar/slowdown_bfloat16_p2"
  nsys_stats "$RES/nsys/slowdown_bfloat16_p2_rank0.nsys-rep"
fi

if wants ncu; then
  p=${GPU_COUNTS##* }
  for prec in bfloat16 float32; do
    # 2 GEMMs per iteration: skip the 10 warm-up iterations, profile the first 2 timed ones.
    step "ncu_${prec}_p$p" 240 env TOOL=ncu PROFILE_RANKS=0 TAG="ncu_${prec}_p$p" PROFILE_DIR="$RES/ncu" \
      NCU_ARGS="$NCU_BASE -k regex:gemm|nvjet|xmma|cutlass --launch-skip 20 --launch-count 4" \
      bash "$HERE/launch.sh" "$p" "${SEQPAR[@]}" -p "$prec" -it 18 -wit 10 --results-dir "$RES/seqpar/ncu_${prec}_p$p"
    for rep in "$RES"/ncu/ncu_"${prec}"_p"$p"_rank*.ncu-rep; do
      [ -f "$rep" ] && "$NCU" --import "$rep" --csv --page details >"${rep%.ncu-rep}_details.csv" 2>>"$RES/logs/ncu_import.log"
    done
  done
fi

if wants ddp; then
  for p in $GPU_COUNTS; do
    step "ddp_nsys_p$p" 240 env GPT2_PRESET=gpt2 TOOL=nsys TAG="ddp_gpt2_p$p" PROFILE_DIR="$RES/nsys" \
      NSYS_ARGS="$NSYS_BASE --capture-range=cudaProfilerApi --capture-range-end=stop" \
      bash "$HERE/launch.sh" "$p" "$PY" -m hpcprof.workloads.ddp --echo-input "$REPO/examples/echo_gpt2" \
      --world-size "$p" --batchsize 8 --epochs 2 --warmup-epochs 1 --steps-per-epoch 12 \
      --results-dir "$RES/ddp/nsys_p$p"
    nsys_stats "$RES/nsys/ddp_gpt2_p${p}"_rank*.nsys-rep
  done
fi

if wants ddpextra && [ "$NGPU" -ge 2 ]; then
  # The window around the whole step, and the torch.profiler window (one Kineto trace per rank).
  step ddp_nsys_step_p2 240 env GPT2_PRESET=gpt2 TOOL=nsys TAG=ddp_gpt2_step_p2 PROFILE_DIR="$RES/nsys" \
    NSYS_ARGS="$NSYS_BASE --capture-range=cudaProfilerApi --capture-range-end=stop" \
    bash "$HERE/launch.sh" 2 "$PY" -m hpcprof.workloads.ddp --echo-input "$REPO/examples/echo_gpt2" \
    --world-size 2 --batchsize 8 --epochs 2 --warmup-epochs 1 --steps-per-epoch 12 --window step \
    --results-dir "$RES/ddp/nsys_step_p2"
  nsys_stats "$RES/nsys/ddp_gpt2_step_p2"_rank*.nsys-rep
  step ddp_torch_p2 240 env GPT2_PRESET=gpt2 TOOL=torch PROFILE_DIR="$RES/torch" HPCPROF_TORCH_GZIP=1 \
    HPCPROF_TORCH_SCHEDULE=wait=1,warmup=1,active=1 bash "$HERE/launch.sh" 2 "$PY" -m hpcprof.workloads.ddp \
    --echo-input "$REPO/examples/echo_gpt2" --world-size 2 --batchsize 8 --epochs 2 --warmup-epochs 1 \
    --steps-per-epoch 12 --results-dir "$RES/ddp/torch_p2"
fi

if wants capture && [ "$NGPU" -ge 2 ]; then
  # One capture range per matmul1 of timed iterations 5..9: nsys writes one report per range.
  step capture_matmul1_p2 180 env TOOL=nsys TAG=capture_matmul1_p2 PROFILE_DIR="$RES/nsys/capture" \
    NSYS_ARGS="$NSYS_BASE --capture-range=cudaProfilerApi --capture-range-end=repeat" \
    bash "$HERE/launch.sh" 2 "${SEQPAR[@]}" -p bfloat16 -it 12 -wit 5 --capture matmul1 --profile-iterations 5:10 \
    --results-dir "$RES/seqpar/capture_matmul1_p2"
  ls -la "$RES/nsys/capture" >"$RES/logs/capture_reports.txt"
  nsys_stats "$(ls "$RES"/nsys/capture/*rank0*.nsys-rep | head -1)"
fi
if wants torch && [ "$NGPU" -ge 2 ]; then
  step torch_bfloat16_p2 150 env TOOL=torch PROFILE_DIR="$RES/torch" HPCPROF_TORCH_GZIP=1 \
    HPCPROF_TORCH_SCHEDULE=wait=1,warmup=1,active=2,repeat=1 bash "$HERE/launch.sh" 2 "${SEQPAR[@]}" -p bfloat16 \
    -it 12 -wit 5 --results-dir "$RES/seqpar/torch_bfloat16_p2"
fi

ls -laR "$RES" >"$RES/logs/listing.txt"
echo "done in ${SECONDS}s"
