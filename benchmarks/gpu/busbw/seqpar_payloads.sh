#!/bin/bash
# AllGather's and ReduceScatter's sizes from NCCL's NVTX payloads on a real nsys export (busbw per
# collective): seqpar bf16 on 2 GPUs through hpcprof submit, nsys on every rank over the whole run (so that the
# ncclCommInitRank ranges, which give a communicator's ranks, are captured), collected; prints the nsys_busbw rows.
# NCCL's payload gives one rank's part (sendcount, recvcount): x the communicator's 2 ranks the size must be
# seqpar's 4608 x 9216 x 2 B = 84934656 B (its all-gather's output, its reduce-scatter's input).
#   bash benchmarks/gpu/busbw/seqpar_payloads.sh OUT      (needs .gpu/whl and .gpu/libs)
set -u
OUT=${1:?output directory}
source benchmarks/gpu/env.sh
mkdir -p "$OUT"
export HPCPROF_WORKDIR=/tmp/hpcprof-payloads
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  timeout -s KILL 300 python3 -m hpcprof submit examples/seqpar_polaris.yaml --site-file benchmarks/gpu/site-h200x2.yaml \
    --wait --set name=seqpar-payloads --set resources.nodes=1 --set resources.ranks_per_node=2 --set profile.ranks=all \
    --set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false \
    --set 'sweep={}' --set workload.args.iterations=20 --set workload.args.warmup_iterations=5
  python3 -m hpcprof collect
  run=$(ls -d "$HPCPROF_WORKDIR"/seqpar-payloads/* | head -n 1)
  python3 -c "
import pandas as pd, sys
t = pd.read_parquet(sys.argv[1] + '/results/nsys_busbw.parquet')
print(t[['scope', 'rank', 'window', 'group_size', 'collective', 'bucket', 'count', 'bytes', 'busbw_gbps', 'note']].to_string())" "$run"
} > "$OUT/seqpar_payloads.txt" 2>&1
tail -n 20 "$OUT/seqpar_payloads.txt"
