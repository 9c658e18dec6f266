#!/bin/bash
# The GPU campaign on one 4-GPU machine (the shape of a Polaris node), all through `hpcprof submit`:
#   1. seqpar float32 vs bfloat16 on 2 and 4 ranks, nsys on every rank, 2 repetitions per point;
#   2. Echo's GPT-2 DDP example (examples/ddp_slowdown.yaml, GPT2_PRESET=gpt2) at world size 1 and 2
#      under nsys, so that collect computes Echo's slowdown of every device of the ws-2 run.
# Every .nsys-rep is exported to SQLite beside it (rank<N>.sqlite, which collect reads without nsys);
# the workdir (with its store, hpcprof.db) is tarred into OUT/campaign-runs.tar.gz without the .nsys-rep
# files, to be unpacked at the same path (/tmp/hpcprof-campaign) and collected,
# compared and reported where hpcprof is developed.
# Needs (carried, git-ignored): .gpu/whl + .gpu/whl2 (sqlalchemy, msgspec, adbc, ...) and
# .gpu/libs (libdw/libelf for nsys), as e2e_hpcprof.sh. Usage: bash benchmarks/gpu/campaign.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nsys >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$PATH
export HPCPROF_WORKDIR=/tmp/hpcprof-campaign
SITE=benchmarks/gpu/site-h200x4.yaml
NSYS_LEAN=(--set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false)
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nsys --version
  set -x
  python3 -m hpcprof submit examples/seqpar_polaris.yaml --site-file "$SITE" --wait \
    --set resources.nodes=1 --set profile.ranks=all --set repeat=2 \
    --set 'sweep={workload.args.precision: [float32, bfloat16], resources.ranks_per_node: [2, 4]}' \
    --set workload.args.iterations=50 --set workload.args.warmup_iterations=10 "${NSYS_LEAN[@]}"
  python3 -m hpcprof submit examples/ddp_slowdown.yaml --site-file "$SITE" --wait --set env.GPT2_PRESET=gpt2 \
    --set workload.args.batchsize=8 --set workload.args.epochs=2 --set workload.args.warmup_epochs=1 \
    --set workload.args.steps_per_epoch=12
  for rep in "$HPCPROF_WORKDIR"/*/*/profiles/nsys/*.nsys-rep; do
    nsys export -t sqlite --force-overwrite true -o "${rep%.nsys-rep}.sqlite" "$rep" >/dev/null
  done
  python3 -m hpcprof status --format json
  set +x
} > "$OUT_DIR/campaign.log" 2>&1
tar -C "$HPCPROF_WORKDIR" -czf "$OUT_DIR/campaign-runs.tar.gz" --exclude='*.nsys-rep' --exclude='derived' \
  --exclude='tmp' .
ls -la "$OUT_DIR"
tail -n 30 "$OUT_DIR/campaign.log"
