#!/bin/bash
# The planted idle programs (benchmarks/gpu/idle_planted.py: a slow dataset, an .item() followed by
# host work, tiny kernels, a compute-bound control) on one GPU, each under nsys and torch.profiler
# with hpcprof's defaults, armed as hpcprof's rank wrapper arms a `command` rank (the run's
# inject/ first on PYTHONPATH, HPCPROF_STEPS=1: the optimizer step hook marks the steps, opens
# torch.profiler's window of steps 6-15 and samples the main thread's stack over it; nsys:
# --trace=cuda,nvtx,osrt --capture-range=none --export=sqlite). Each program writes its own
# measurement (own.json). Small fixtures go to $OUT/idle_planted/TOOL-CAUSE/: own.json,
# steps/rank0.jsonl, samples/rank0.jsonl, the torch trace (.json.gz) or the nsys export
# (VACUUMed, xz); the launch program runs 300 tiny ops (600 kernels) a step to keep them small.
# Then the stack sampler's overhead on this host (benchmarks/sampler_overhead.py).
#   OUT=/some/dir bash benchmarks/gpu/idle_planted.sh        (from the repository root; < 6 min)
set -u
OUT=${OUT:?set OUT to the output directory}
source benchmarks/gpu/env.sh
WORK=/tmp/idle_planted
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT/idle_planted"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nsys --version
  for cause in input sync launch control; do
    for tool in torch nsys; do
      dir=$WORK/$tool-$cause
      mkdir -p "$dir/profiles"
      hook=(env CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$REPO/hpcprof/inject:$PYTHONPATH" HPCPROF_STEPS=1
            HPCPROF_RUN_DIR="$dir" HPCPROF_RANK=0 HPCPROF_PROFILE_TOOL=$tool HPCPROF_STEPS_DRIVE=1
            HPCPROF_PROFILE_DIR="$dir/profiles" HPCPROF_TORCH_GZIP=1)
      program=(python3 "$REPO/benchmarks/gpu/idle_planted.py" $cause --steps 20 --tiny 300 --out "$dir/own.json")
      start=$(date +%s.%N)
      if [ $tool = torch ]; then
        "${hook[@]}" "${program[@]}" > "$dir/stdout" 2> "$dir/stderr"
      else
        "${hook[@]}" nsys profile --trace=cuda,nvtx,osrt --capture-range=none --export=sqlite \
          --force-overwrite=true -o "$dir/profiles/rank0" "${program[@]}" > "$dir/stdout" 2> "$dir/stderr"
      fi
      rc=$?
      echo "$tool $cause rc=$rc $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s: $(cat "$dir/own.json" 2>/dev/null)"
      [ $rc = 0 ] || tail -5 "$dir/stderr"
      keep=$OUT/idle_planted/$tool-$cause
      mkdir -p "$keep/steps" "$keep/samples" "$keep/profiles"
      cp "$dir/own.json" "$keep/" 2>/dev/null
      cp "$dir"/steps/*.jsonl "$keep/steps/" 2>/dev/null
      cp "$dir"/samples/*.jsonl "$keep/samples/" 2>/dev/null
      cp "$dir"/profiles/*.json.gz "$keep/profiles/" 2>/dev/null
      if [ -f "$dir/profiles/rank0.sqlite" ]; then
        python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('VACUUM'); c.close()" "$dir/profiles/rank0.sqlite"
        xz -9 -c "$dir/profiles/rank0.sqlite" > "$keep/profiles/rank0.sqlite.xz"
      fi
    done
  done
  # the stack sampler's own cost per step on this host's CPU (sampler off against every 5 ms)
  python3 benchmarks/sampler_overhead.py --steps 30 --repeat 5 --out "$OUT/sampler_overhead_gpu_host.txt"
  du -sh "$OUT/idle_planted"
  find "$OUT/idle_planted" -type f -printf '%s %p\n' | sort -n | tail -20
} 2>&1 | tee "$OUT/idle_planted.txt"
