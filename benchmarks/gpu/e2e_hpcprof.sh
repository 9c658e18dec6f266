#!/bin/bash
# hpcprof itself, end to end on the GPU machine: submit -> rendered job + rank wrapper -> run ->
# collect (nsys export + nsys analyses, HTA analyses, ncu import) -> report, for seqpar on 2 GPUs:
#   1. nsys on every rank, 2. torch.profiler on every rank, 3. ncu on rank 0 (GEMMs, skip/count).
# Needs (carried, git-ignored): .gpu/whl + .gpu/whl2 (sqlalchemy, msgspec, adbc) and
# .gpu/libs (libdw/libelf for nsys, from shared/tools/gpu-nsys-libs.sh). Usage: bash e2e_hpcprof.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl .gpu/whl2/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
command -v ncu >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/ncu | tail -1)" /tmp/bin/ncu
export PATH=/tmp/bin:$PATH
export HPCPROF_WORKDIR=/tmp/hpcprof-runs
SITE=benchmarks/gpu/site-h200x2.yaml
COMMON=(--site-file "$SITE" --wait --set resources.nodes=1 --set resources.ranks_per_node=2
        --set 'sweep={}' --set workload.args.precision=bfloat16 --set profile.ranks=all)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nsys --version; ncu --version | tail -1
  set -x
  python3 -m hpcprof submit examples/seqpar_polaris.yaml "${COMMON[@]}" \
    --set workload.args.iterations=50 --set workload.args.check=true \
    --set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false
  python3 -m hpcprof submit examples/seqpar_polaris.yaml "${COMMON[@]}" --set profile.tool=torch \
    --set profile.torch.gzip=true --set workload.args.iterations=12
  python3 -m hpcprof submit examples/seqpar_polaris.yaml "${COMMON[@]}" --set profile.tool=ncu \
    --set 'profile.ranks=[0]' --set 'profile.ncu.kernel_name=regex:gemm|nvjet|xmma|cutlass' \
    --set profile.ncu.launch_skip=4 --set profile.ncu.launch_count=4 \
    --set 'profile.ncu.sections=[SpeedOfLight,LaunchStats,Occupancy,MemoryWorkloadAnalysis]' \
    --set workload.args.iterations=4 --set workload.args.warmup_iterations=2
  python3 -m hpcprof collect
  python3 -m hpcprof status --format json
  set +x
} > "$OUT_DIR/e2e.log" 2>&1
python3 -m hpcprof report $(ls /tmp/hpcprof-runs/seqpar-polaris) --rows 8 > "$OUT_DIR/report.txt" 2>&1
tar -C /tmp/hpcprof-runs -czf "$OUT_DIR/runs.tar.gz" --exclude='*.nsys-rep' --exclude='derived' --exclude='tmp' .
tail -n 40 "$OUT_DIR/e2e.log"
