#!/bin/bash
# Fresh GPU data through hpcprof itself on a lent 4x H200 machine (submit -> rendered job + rank
# wrapper -> run -> collect): the exports and Kineto traces under tests/fixtures/{nsys/h200_campaign,
# hta/h200_*} and the GPU affinity check in benchmarks/gpu/data/campaign/ came from this script.
#   1. seqpar float32 vs bfloat16 on 2 and 4 GPUs, nsys on every rank (campaign/seqpar_nsys.yaml);
#   2. Echo's GPT-2 (examples/ddp_slowdown.yaml) at world size 1 and 2 under nsys;
#   3. Kineto traces: seqpar and the DDP example on 2 GPUs under torch.profiler (for HTA);
#   4. the Polaris site's rendering (PALS -> Open MPI, gpu_affinity: reverse): which GPU each rank sees.
# Needs (carried, git-ignored): .gpu/whl (wheels the GPU image lacks) and .gpu/libs (libdw/libelf for
# nsys, from shared/tools/gpu-nsys-libs.sh). Usage: bash benchmarks/gpu/fresh_data.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
command -v ncu >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/ncu | tail -1)" /tmp/bin/ncu
export PATH=/tmp/bin:$PATH
export HPCPROF_WORKDIR=/tmp/campaign
X4=(--site-file benchmarks/gpu/site-h200x4.yaml --wait)
DDP=(--set env.GPT2_PRESET=gpt2 --set workload.args.batchsize=8 --set workload.args.epochs=2
     --set workload.args.warmup_epochs=1 --set workload.args.steps_per_epoch=12)
{
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nsys --version; ncu --version | tail -1
  set -x
  time python3 -m hpcprof submit benchmarks/gpu/campaign/seqpar_nsys.yaml "${X4[@]}"
  time python3 -m hpcprof submit examples/ddp_slowdown.yaml "${X4[@]}" "${DDP[@]}"
  time python3 -m hpcprof submit benchmarks/gpu/campaign/seqpar_torch.yaml "${X4[@]}"
  time python3 -m hpcprof submit examples/ddp_slowdown.yaml "${X4[@]}" "${DDP[@]}" --set 'sweep={}' \
    --set resources.ranks_per_node=2 --set workload.args.world_size=2 --set profile.tool=torch \
    --set profile.torch.wait=1 --set profile.torch.warmup=1 --set profile.torch.active=1 --set profile.torch.gzip=true
  time python3 -m hpcprof submit benchmarks/gpu/campaign/affinity.yaml \
    --site-file benchmarks/gpu/site-polaris-local.yaml --wait
  time python3 -m hpcprof collect
  python3 -m hpcprof status
  set +x
} > "$OUT_DIR/campaign.log" 2>&1
grep -rh AFFINITY /tmp/campaign/affinity/*/logs/ | sort > "$OUT_DIR/affinity.txt"
tar -C /tmp/campaign -czf "$OUT_DIR/campaign.tar.gz" --exclude='*.nsys-rep' --exclude='derived' --exclude='tmp' .
ls -la "$OUT_DIR"; tail -n 30 "$OUT_DIR/campaign.log"; cat "$OUT_DIR/affinity.txt"
