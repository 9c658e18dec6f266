#!/bin/bash
# Public trainers, unchanged, through hpcprof on the lent 2-GPU machine:
# each trainer as a `command` under torchrun (site-torchrun-x2.yaml: the shipped identity
# convention, which torchrun's workers get as local-rank), under nsys, torch.profiler and no
# profiler (the overhead's baseline), then again with `gpu_affinity: none`; collect, report (text
# text here, HTML from the runs brought back) and trainers_check.py's checks against the trainers' own step times and a hand
# computation of idle % on the rank files.
#   bash benchmarks/gpu/trainers.sh OUT TRAINER...     (TRAINER: nanogpt | timm)
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
    set -x
    python3 -m hpcprof submit "$REPO/benchmarks/gpu/trainers/$trainer.yaml" --site-file "$SITE" --workdir "$WORKDIR" --wait
    python3 -m hpcprof submit "$REPO/benchmarks/gpu/trainers/$trainer.yaml" --site-file "$SITE" --workdir "$WORKDIR" \
      --set gpu_affinity=none --wait
    set +x
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
python3 benchmarks/gpu/trainers_check.py "$WORKDIR" "$OUT_DIR"/report-*.txt > "$OUT_DIR/check.txt" 2>&1
# the runs without their profiles (the HTML report is made where plotly is: `hpcprof report --html`)
tar -C "$WORKDIR" -czf "$OUT_DIR/runs.tar.gz" --exclude='profiles' --exclude='derived' --exclude='tmp' .
tail -n 30 "$OUT_DIR/trainers.log"
cat "$OUT_DIR/check.txt"
