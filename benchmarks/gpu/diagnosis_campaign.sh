#!/bin/bash
# A diagnosis campaign on the lent 2-GPU machine, all through `hpcprof submit` / `collect`, each
# with `ceilings: true` (hpcprof bench ceilings after the workload, in the same job):
#   1. seqpar float32 and bfloat16 on 2 ranks, 3 repetitions, nsys on every rank (its timed loop opens
#      the capture range);
#   2. Echo's GPT-2 DDP pair (examples/ddp_slowdown.yaml, GPT2_PRESET=gpt2) at world size 1 and 2;
#   3. karpathy/nanoGPT's train.py, unchanged, under torchrun and nsys (benchmarks/gpu/trainers/nanogpt.yaml).
# Then collect, the terminal report of each (its first block: what limits each point and the top fixes),
# and the runs without their profiles in OUT/runs.tar.gz (the HTML reports and screenshots are made from them
# where Chromium is). Needs (carried, git-ignored) .gpu/whl, .gpu/libs and .gpu/trainers/nanogpt.
#   bash benchmarks/gpu/diagnosis_campaign.sh OUT
set -u
OUT_DIR=${1:?output directory}
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR" /tmp/trainers
export HPCPROF_WORKDIR=/tmp/hpcprof-diagnosis
LEAN=(--set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false
      --set resources.nodes=1 --set resources.ranks_per_node=2 --set profile.ranks=all --set ceilings=true)
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  nsys --version
  set -x
  python3 -m hpcprof submit examples/seqpar_polaris.yaml --site-file benchmarks/gpu/site-h200x2.yaml --wait "${LEAN[@]}" \
    --set name=diagnosis-seqpar --set repeat=3 --set workload.args.iterations=50 \
    --set workload.args.warmup_iterations=10 --set profile.nsys.capture_range=cudaProfilerApi \
    --set profile.nsys.capture_range_end=stop
  python3 -m hpcprof submit examples/ddp_slowdown.yaml --site-file benchmarks/gpu/site-h200x2.yaml --wait \
    --set ceilings=true --set env.GPT2_PRESET=gpt2 --set workload.args.batchsize=8 --set workload.args.epochs=2 \
    --set workload.args.warmup_epochs=1 --set workload.args.steps_per_epoch=12
  rm -rf /tmp/trainers/nanogpt && cp -r "$REPO/.gpu/trainers/nanogpt" /tmp/trainers/nanogpt
  (cd /tmp/trainers/nanogpt && mkdir -p data/openwebtext && python3 -c "
import numpy as np
rng = np.random.default_rng(0)
rng.integers(0, 50257, 20_000_000, dtype=np.uint16).tofile('data/openwebtext/train.bin')
rng.integers(0, 50257, 2_000_000, dtype=np.uint16).tofile('data/openwebtext/val.bin')" &&
   python3 -m hpcprof submit "$REPO/benchmarks/gpu/trainers/nanogpt.yaml" \
     --site-file "$REPO/benchmarks/gpu/site-torchrun-x2.yaml" --wait --set 'sweep={}' --set ceilings=true)
  python3 -m hpcprof collect --workers 8
  python3 -m hpcprof status
  set +x
} > "$OUT_DIR/campaign.log" 2>&1
for exp in diagnosis-seqpar echo-slowdown nanogpt; do
  runs=$(ls "$HPCPROF_WORKDIR/$exp")
  COLUMNS=160 python3 -m hpcprof report $runs > "$OUT_DIR/report_$exp.txt" 2>&1
  cat "$HPCPROF_WORKDIR/$exp"/*/ceilings.json > "$OUT_DIR/ceilings_$exp.json" 2>/dev/null
done
tar -C "$HPCPROF_WORKDIR" -czf "$OUT_DIR/runs.tar.gz" --exclude='profiles' --exclude='derived' --exclude='tmp' .
tail -n 25 "$OUT_DIR/campaign.log"
for exp in diagnosis-seqpar echo-slowdown nanogpt; do sed -n '1,14p' "$OUT_DIR/report_$exp.txt"; done
