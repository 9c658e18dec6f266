#!/bin/bash
# Memory and out-of-memory on the lent 1-2 GPU machine (H200), < 6 minutes, everything under $OUT:
#   1. a real CUDA OOM through hpcprof (memory/oom_plant.py under torchrun, site-torchrun-x2.yaml):
#      status, `logs --hang`, report; the run's small files as a test fixture (oom_run.tar.gz, < 2 MB);
#   2. a small real memory snapshot with a planted leak (memory/leak_snapshot.py: leak_snapshot.pickle) and
#      `hpcprof memory` of it (its peak against the program's own max_memory_allocated, the leak's line);
#   3. peak memory: a plain training loop's own torch.cuda.max_memory_allocated/reserved (memory/train_peak.py)
#      and the same program through hpcprof (the step hook: steps_memory.parquet, headline memory.*); seqpar's
#      and the ddp harness's (GPT-2 preset) own (memory/peak.py) and the same workloads through hpcprof;
#      the training loop again with `profile.memory: true` (its snapshot read by `hpcprof memory`; its
#      iteration.median beside the run without it);
#   4. the step time with PyTorch's memory history off, Python stacks, all stacks (memory/history_cost.py),
#      3 alternated rounds, the medians in a table.
# Usage, from the repository root: OUT=/some/dir [PARTS="2 3"] bash benchmarks/gpu/memory.sh   (PARTS: all four by default)
# Needs what env.sh needs (carried, git-ignored): .gpu/whl (msgspec, sqlalchemy, ...), .gpu/libs; torch with
# CUDA, torchrun. With one GPU, parts 1 and 3 run on one rank only where they can (part 1 needs 2).
set -u
OUT_DIR=${OUT:-/tmp/memory-out}
source benchmarks/gpu/env.sh
mkdir -p "$OUT_DIR" /tmp/memory
WORKDIR=/tmp/memory-runs
HERE=$REPO/benchmarks/gpu/memory
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" -gt 2 ] && NGPU=2     # the site files declare 2 GPUs
cp "$HERE"/*.py /tmp/memory/
want() { [[ " ${PARTS:-1 2 3 4} " == *" $1 "* ]]; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "== 1. a real CUDA OOM through hpcprof ($NGPU GPUs)"
  if ! want 1; then
    echo "skipped: not in PARTS"
  elif [ "$NGPU" -ge 2 ]; then
    cd /tmp/memory
    SECONDS=0
    timeout 240 python3 -m hpcprof submit "$HERE/oom.yaml" --site-file "$REPO/benchmarks/gpu/site-torchrun-x2.yaml" \
      --workdir "$WORKDIR" --wait
    echo "oom run took ${SECONDS} s"
    run=$(ls -t "$WORKDIR/memory-oom" | head -1)
    python3 -m hpcprof status --workdir "$WORKDIR" "$run" --format json
    python3 -m hpcprof logs --workdir "$WORKDIR" "$run" --hang
    python3 -m hpcprof report --workdir "$WORKDIR" "$run" 2>&1 | head -40
    tail -n 5 "$WORKDIR/memory-oom/$run"/logs/rank*.log
    ls -l "$WORKDIR/memory-oom/$run/forensics"
    tar -C "$WORKDIR/memory-oom" -czf "$OUT_DIR/oom_run.tar.gz" --exclude=profiles --exclude=derived --exclude=tmp \
      --exclude='*.sqlite' --exclude='*.nsys-rep' "$run"
    ls -l "$OUT_DIR/oom_run.tar.gz"
    cd "$REPO"
  else
    echo "skipped: needs 2 GPUs"
  fi
  echo "== 2. a real memory snapshot with a planted leak"
  want 2 && (cd /tmp/memory && timeout 120 python3 leak_snapshot.py "$OUT_DIR/leak_snapshot.pickle")
  SECONDS=0
  want 2 && python3 -m hpcprof memory "$OUT_DIR/leak_snapshot.pickle" --html "$OUT_DIR/leak_snapshot.html"
  echo "hpcprof memory took ${SECONDS} s"
  echo "== 3. peak memory: the program's own, then through hpcprof"
  if want 3; then
    cd /tmp/memory
    timeout 120 python3 train_peak.py 20
    timeout 180 python3 -m hpcprof submit "$HERE/train_peak.yaml" --site-file "$REPO/benchmarks/gpu/site-h200x2.yaml" \
      --workdir "$WORKDIR" --wait
    timeout 180 python3 -m hpcprof submit "$HERE/train_peak.yaml" --site-file "$REPO/benchmarks/gpu/site-h200x2.yaml" \
      --workdir "$WORKDIR" --wait --set profile.memory=true
    for snapshot in $(find "$WORKDIR/memory-train" -path '*/memory/rank*.pickle'); do
      ls -l "$snapshot"; python3 -m hpcprof memory "$snapshot" --top 5
    done
    timeout 120 torchrun --standalone --nproc_per_node="$NGPU" peak.py seqpar -it 10 -wit 3 -p bfloat16 2>&1 | grep -E '^peak|Error'
    GPT2_PRESET=gpt2 timeout 120 torchrun --standalone --nproc_per_node="$NGPU" peak.py ddp \
      --echo-input "$REPO/examples/echo_gpt2" --world-size "$NGPU" --epochs 1 --warmup-epochs 0 --steps-per-epoch 20 \
      2>&1 | grep -E '^peak|Error'
    cd "$REPO"
    COMMON=(--site-file benchmarks/gpu/site-h200x2.yaml --workdir "$WORKDIR" --wait --set resources.nodes=1
            --set "resources.ranks_per_node=$NGPU" --set 'sweep={}' --set profile.tool=none)
    timeout 120 python3 -m hpcprof submit examples/seqpar_polaris.yaml "${COMMON[@]}" --set workload.args.iterations=10 \
      --set workload.args.warmup_iterations=3 --set workload.args.precision=bfloat16
    timeout 120 python3 -m hpcprof submit examples/ddp_slowdown.yaml "${COMMON[@]}" --set env.GPT2_PRESET=gpt2 \
      --set "workload.args.world_size=$NGPU" --set workload.args.epochs=1 --set workload.args.warmup_epochs=0 \
      --set workload.args.steps_per_epoch=20
    python3 -m hpcprof collect --workdir "$WORKDIR"
    for headline in $(find "$WORKDIR" -name headline.json); do
      python3 -c "
import json, sys
metrics = json.load(open(sys.argv[1])).get('metrics', [])
found = [m for m in metrics if str(m[0]).startswith('memory.') or m[0] == 'iteration.median']
print(sys.argv[1].split('/')[-4:-2], json.dumps(found) if found else 'no memory metric recorded')" "$headline"
    done
    for table in $(find "$WORKDIR" -name 'steps_memory.parquet'); do
      echo "$table"; python3 -c "import pandas as pd, sys; print(pd.read_parquet(sys.argv[1]).to_string())" "$table"
    done
  fi
  echo "== 4. memory history: step time off / python stacks / all stacks, 3 alternated rounds"
  cd /tmp/memory
  want 4 && for round in 1 2 3; do
    for mode in off python all; do
      timeout 60 python3 history_cost.py "$mode" 2>&1 | tail -1
    done
  done
  cd "$REPO"
} > "$OUT_DIR/memory.txt" 2>&1
python3 - "$OUT_DIR/memory.txt" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
runs = {}
for mode, median in re.findall(r"history (\w+): median ([\d.]+) ms", text):
    runs.setdefault(mode, []).append(float(median))
print("memory history     median step ms (3 runs)     vs off")
base = statistics.median(runs.get("off", [float("nan")]))
for mode, values in runs.items():
    m = statistics.median(values)
    print(f"  {mode:8s} {m:10.3f}   {' '.join(f'{v:.3f}' for v in values):30s} {100 * (m / base - 1):+6.2f} %")
for line in re.findall(r"^\['.*$", text, re.M):     # each collected run's memory.* and iteration.median
    print(line[:400])
for line in re.findall(r"^(?:peak |own peak: ).*$", text, re.M):
    print(line)
for line in re.findall(r"^leak line: .*$", text, re.M):
    print(line)
said = re.findall(r'"reason": "([^"]*out of CUDA memory[^"]*)"', text)
print("OOM sentence:", said[0] if said else "NOT FOUND (see memory.txt)")
PY
ls -l "$OUT_DIR"
