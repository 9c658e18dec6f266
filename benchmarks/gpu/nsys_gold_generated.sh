#!/bin/bash
# nsys 2025.3.1 gold for the generated exports (tests/differential/nsys_gen.py), on the GPU machine.
# Generates exports gen<seed>.sqlite for seeds FIRST..FIRST+COUNT-1 from tests/fixtures, runs
# `nsys stats --format csv` with every current-layout report on each (one nsys per export, nproc
# at a time) and writes OUT/nsys_gold_generated_2025.3.1.tar.xz holding gen<seed>_<report>.csv
# (a report nsys skips leaves an empty or no file) and gen<seed>.err (nsys's stderr, kept only
# when it reports an error), plus OUT/nsys_gold_generated.log.
# Exports where nsys reports an error (e.g. a report needing TARGET_INFO_GPU, which some bases
# lack) are left out by the test, hence 700 seeds for at least 500 compared exports.
# Needs .gpu/libs carried (libdw/libelf, shared/tools/gpu-nsys-libs.sh).
# Usage: benchmarks/gpu/nsys_gold_generated.sh OUT [FIRST=0] [COUNT=700]
set -euo pipefail
OUT_DIR=${1:?output directory}; FIRST=${2:-0}; COUNT=${3:-700}
REPORTS=cuda_gpu_kern_sum,cuda_gpu_kern_gb_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,cuda_gpu_sum,nvtx_sum,nvtx_pushpop_sum,nvtx_startend_sum,osrt_sum,cuda_gpu_trace
export LD_LIBRARY_PATH=$PWD/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=${NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/exports" "$work/gold" "$OUT_DIR"
start=$(date +%s%N)
python3 tests/differential/nsys_gen.py "$work/exports" "$FIRST" "$COUNT"
gen_ms=$(( ($(date +%s%N) - start) / 1000000 ))
export NSYS REPORTS gold=$work/gold
start=$(date +%s%N)
ls "$work"/exports/*.sqlite | xargs -P "$(nproc)" -I{} bash -c \
  'db={}; stem=$(basename "$db" .sqlite); "$NSYS" stats --report "$REPORTS" --format csv \
     --force-overwrite true --output "$gold/$stem" "$db" >"$gold/$stem.err" 2>&1 || true
   grep -qi "error" "$gold/$stem.err" || rm -f "$gold/$stem.err"'
stats_ms=$(( ($(date +%s%N) - start) / 1000000 ))
{
  "$NSYS" --version
  echo "exports: $COUNT (seeds $FIRST..$((FIRST + COUNT - 1))), generated in ${gen_ms} ms"
  echo "nsys stats: $(ls "$work"/gold/*.csv | wc -l) CSV files in ${stats_ms} ms on $(nproc) cores"
  echo "exports with errors: $(ls "$work"/gold/*.err 2>/dev/null | wc -l)"
  head -3 "$work"/gold/*.err 2>/dev/null | head -30 || true
} | tee "$OUT_DIR/nsys_gold_generated.log"
tar -C "$work/gold" -cJf "$OUT_DIR/nsys_gold_generated_2025.3.1.tar.xz" .
ls -l "$OUT_DIR"
