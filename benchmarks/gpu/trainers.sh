#!/bin/bash
# Public trainers, unchanged, through hpcprof on the lent 1-2 GPU machine (one rank per GPU):
# each trainer as a `command` under torchrun (site-torchrun-x2.yaml: the shipped identity
# convention, which torchrun's workers get as local-rank), under nsys, torch.profiler and no
# profiler (the overhead's baseline), then with no profiler and `profile.memory` (the memory history's
# cost, from the run's own steps), then (AFFINITY_NONE=1, the default) again with `gpu_affinity: none`;
# the trainer alone under memory/peak.py (its own torch.cuda.max_memory_allocated over the whole run,
# no hook); collect, report (text here, HTML from the runs brought back) and trainers_check.py's
# checks against the trainers' own step times and peaks, a hand computation of idle % on the rank
# files, and the idle's named causes.
#   [AFFINITY_NONE=0] bash benchmarks/gpu/trainers.sh OUT TRAINER...     (TRAINER: nanogpt | timm)
# Needs (carried, git-ignored): .gpu/whl (sqlalchemy, msgspec, adbc, greenlet for Python 3.12),
# .gpu/libs (libdw/libelf for nsys: shared/tools/gpu-nsys-libs.sh) and the trainers' sources as
# fetched, unchanged: .gpu/trainers/nanogpt (karpathy/nanoGPT's train.py, model.py,
# configurator.py) and .gpu/trainers/timm (huggingface/pytorch-image-models' train.py and timm/).
set -u
OUT_DIR=${1:?output directory}
shift
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR" /tmp/trainers
WORKDIR=/tmp/hpcprof-runs
SITE=$REPO/benchmarks/gpu/site-torchrun-x2.yaml
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" -gt 2 ] && NGPU=2     # the site file declares 2 GPUs
RANKS=(--set "resources.ranks_per_node=$NGPU")

prepare() {   # the trainer's data: random tokens (nanoGPT), a folder of random JPEGs (timm)
  case $1 in
    nanogpt) mkdir -p data/openwebtext && python3 -c "
import numpy as np
rng = np.random.default_rng(0)
rng.integers(0, 50257, 20_000_000, dtype=np.uint16).tofile('data/openwebtext/train.bin')
rng.integers(0, 50257, 2_000_000, dtype=np.uint16).tofile('data/openwebtext/val.bin')" ;;
    timm) python3 -c "
import os
from concurrent.futures import ProcessPoolExecutor
import numpy as np
from PIL import Image
def write(job):
    split, i = job
    d = f'data/{split}/class{i % 4}'
    os.makedirs(d, exist_ok=True)
    pixels = np.random.default_rng(i).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(f'{d}/{i}.jpg', quality=90)
jobs = [('train', i) for i in range(3328)] + [('validation', i) for i in range(256)]
with ProcessPoolExecutor(16) as pool:
    list(pool.map(write, jobs, chunksize=64))" ;;
  esac
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nsys --version
  for trainer in "$@"; do
    rm -rf "/tmp/trainers/$trainer" && cp -r "$REPO/.gpu/trainers/$trainer" "/tmp/trainers/$trainer"
    cd "/tmp/trainers/$trainer" && prepare "$trainer"
    experiment=$REPO/benchmarks/gpu/trainers/$trainer.yaml
    set -x
    python3 -m hpcprof submit "$experiment" --site-file "$SITE" --workdir "$WORKDIR" "${RANKS[@]}" --wait
    python3 -m hpcprof submit "$experiment" --site-file "$SITE" --workdir "$WORKDIR" "${RANKS[@]}" --wait \
      --set 'sweep={}' --set profile.tool=none --set profile.memory=true
    [ "${AFFINITY_NONE:-1}" = 1 ] && python3 -m hpcprof submit "$experiment" --site-file "$SITE" --workdir "$WORKDIR" \
      "${RANKS[@]}" --set gpu_affinity=none --wait
    mapfile -t argv < <(python3 -c 'import sys, yaml; print("\n".join(yaml.safe_load(open(sys.argv[1]))["workload"]["argv"][2:]))' "$experiment")
    timeout 300 torchrun --standalone --nproc_per_node="$NGPU" "$REPO/benchmarks/gpu/memory/peak.py" train.py "${argv[@]}" \
      > "$OUT_DIR/own-$trainer.log" 2>&1
    set +x
    grep '^peak ' "$OUT_DIR/own-$trainer.log" | sed "s/^peak /peak $trainer /" >> "$OUT_DIR/peaks.txt"
    cd "$REPO"
  done
  python3 -m hpcprof collect --workdir "$WORKDIR"
  python3 -m hpcprof status --workdir "$WORKDIR"
} > "$OUT_DIR/trainers.log" 2>&1
for trainer in "$@"; do   # one report per submit (the sweep of tools: nsys, torch, none)
  for sweep in $(ls "$WORKDIR/$trainer" | sed 's/-p[0-9]*$//' | sort -u); do
    runs=$(ls "$WORKDIR/$trainer" | grep "^$sweep")
    python3 -m hpcprof report --workdir "$WORKDIR" $runs > "$OUT_DIR/report-$trainer-$sweep.txt" 2>&1
  done
  python3 -m hpcprof compare --workdir "$WORKDIR" $(ls "$WORKDIR/$trainer") > "$OUT_DIR/compare-$trainer.txt" 2>&1
  grep -h "^iter \|Train: " "$WORKDIR/$trainer"/*/logs/rank0.log | head -3 >> "$OUT_DIR/trainers.log"
done
python3 benchmarks/gpu/trainers_check.py "$WORKDIR" "$OUT_DIR/peaks.txt" "$OUT_DIR"/report-*.txt > "$OUT_DIR/check.txt" 2>&1
# the runs without their profiles (the HTML report is made where plotly is: `hpcprof report --html`)
tar -C "$WORKDIR" -czf "$OUT_DIR/runs.tar.gz" --exclude='profiles' --exclude='derived' --exclude='tmp' .
tail -n 30 "$OUT_DIR/trainers.log"
cat "$OUT_DIR/check.txt"
