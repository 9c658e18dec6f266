#!/bin/bash
# Gold from the newest nsys (2025.3.1, only on the GPU machine): `nsys stats --format csv` for every
# current-layout report hpcprof knows, on every export under DIR (`*.sqlite` or `*.sqlite.xz`), or on
# the generated exports of seeds FIRST .. FIRST+COUNT-1 (tests/differential/nsys_exports.py, made
# here from the committed fixtures: the same bytes as in CI).
# Writes OUT/gold.tar.xz holding <stem>_<report>.csv (a report nsys cannot make on that export,
# e.g. no NVTX, leaves no file) and OUT/nsys_gold.log.
# Needs .gpu/libs carried (libdw/libelf, shared/tools/gpu-nsys-libs.sh).
# Usage: nsys_gold.sh DIR OUT
#        nsys_gold.sh --seeds FIRST COUNT OUT
# Environment: NSYS_GOLD_REPORTS (space-separated report names, default the list below),
# NSYS_GOLD_GENERATOR (a generator under tests/differential/ taking FIXTURES DEST FIRST COUNT, default
# nsys_exports.py) and NSYS (the nsys to run, default the newest under /opt/nvidia/nsight-compute).
# nsys 2022.4's gold is made on the CPU machine (tests/test_differential_nsys.py says which):
#        NSYS=/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys NSYS_GOLD_REPORTS="..." \
#          bash benchmarks/gpu/nsys_gold.sh --seeds 1000 520 $OUT
# The exports with exact ties, to commit as tests/fixtures/nsys/gold_generated_ties_2025.3.1.tar.xz:
#        bash benchmarks/gpu/nsys_gold.sh --seeds 1000 520 $OUT
# The exports with NVTX ranges enclosing launches (nsys_exports.PROJECTION_SEEDS), committed as
# tests/fixtures/nsys/gold_generated_projection_2025.3.1.tar.xz:
#        bash benchmarks/gpu/nsys_gold.sh --seeds 2000 520 $OUT
set -u
if [ "${1:-}" = "--seeds" ]; then
  FIRST=${2:?first seed}; COUNT=${3:?number of seeds}; OUT_DIR=${4:?output directory}
  SRC=$(mktemp -d); mkdir -p "${4:?output directory}"
  python3 "tests/differential/${NSYS_GOLD_GENERATOR:-nsys_exports.py}" tests/fixtures "$SRC" "$FIRST" "$COUNT" || exit 1
else
  SRC=${1:?folder of exports}; OUT_DIR=${2:?output directory}; mkdir -p "$OUT_DIR"
fi
REPORTS="cuda_gpu_kern_sum cuda_gpu_kern_gb_sum cuda_api_sum cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum
cuda_gpu_sum nvtx_sum nvtx_pushpop_sum nvtx_startend_sum osrt_sum cuda_gpu_trace"
REPORTS="$REPORTS cuda_api_gpu_sum cuda_kern_exec_sum cuda_kern_exec_trace cuda_api_trace nvtx_gpu_proj_sum
nvtx_gpu_proj_trace nvtx_kern_sum"
REPORTS=${NSYS_GOLD_REPORTS:-$REPORTS}
export LD_LIBRARY_PATH=$PWD/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=${NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)}
work=$(mktemp -d); gold=$work/gold; mkdir -p "$gold"
for f in "$SRC"/*.sqlite "$SRC"/*.sqlite.xz; do
  [ -e "$f" ] || continue
  stem=$(basename "${f%.xz}" .sqlite)
  case "$f" in *.xz) xz -dc "$f" > "$work/$stem.sqlite" ;; *) cp "$f" "$work/$stem.sqlite" ;; esac
done
{
  "$NSYS" --version
  ls "$work"/*.sqlite | wc -l
  # one nsys per export with every report (-o PREFIX writes PREFIX_<report>.csv), 16 at a time
  export NSYS gold REPORTS_CSV=$(echo $REPORTS | tr ' ' ',')
  ls "$work"/*.sqlite | xargs -P "$(nproc)" -I{} bash -c \
    'db={}; stem=$(basename "$db" .sqlite); "$NSYS" stats --report "$REPORTS_CSV" --format csv \
       --force-overwrite true --output "$gold/$stem" "$db" >/dev/null 2>"$db.err" || echo "$stem: rc=$?"; \
     grep -i "skip\|error" "$db.err" | sed "s|^|$stem: |" | head -5'
  ls "$gold" | wc -l
} > "$OUT_DIR/nsys_gold.log" 2>&1
tar -C "$gold" -cJf "$OUT_DIR/gold.tar.xz" .
cat "$OUT_DIR/nsys_gold.log" | tail -20
