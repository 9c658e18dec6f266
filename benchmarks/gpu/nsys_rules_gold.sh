#!/bin/bash
# nsys 2025.3.1's `nsys analyze` rules (only on the GPU machine) on the generated rules exports of
# seeds FIRST .. FIRST+COUNT-1 (tests/differential/nsys_rules_exports.py, made here from the
# committed fixtures: the same bytes as in CI), for comparing with `hpcprof nsys analyze`
# (tests/test_nsys_rules.py reproduces nsys 2022.4). Writes OUT/rules_gold.tar.xz holding
# <stem>_<rule>[_<args>].csv for the six rules with nsys's defaults and with
# rows=5/gap=1/threshold=80/chunks=97, OUT/nsys_rules_gold.log (version, SKIPPED lines,
# --help-rules ALL, what it does with the 2022.4 names and with exports lacking greenContextId or
# ENUM_CUDA_MEM_KIND) and OUT/rules_2025/ (the install's rules/*.py and the report base classes
# they import, to READ for thresholds and ordering; not to be committed: NVIDIA's code).
# Needs .gpu/libs carried (libdw/libelf, shared/tools/gpu-nsys-libs.sh).
# Usage: bash benchmarks/gpu/nsys_rules_gold.sh FIRST COUNT OUT     (e.g. 1000 120 $OUT)
set -u
FIRST=${1:?first seed}; COUNT=${2:?number of seeds}; OUT_DIR=${3:?output directory}
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH=$PWD/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
INSTALL=$(dirname "$NSYS")
work=$(mktemp -d); gold=$work/gold; mkdir -p "$gold" "$OUT_DIR/rules_2025"
python3 tests/differential/nsys_rules_exports.py tests/fixtures "$work" "$FIRST" "$COUNT" || exit 1
cp "$INSTALL"/rules/*.py "$OUT_DIR/rules_2025/" 2>/dev/null
find "$INSTALL" -path '*python/lib*' -name '*.py' -exec cp {} "$OUT_DIR/rules_2025/" \; 2>/dev/null
RULES="cuda_memcpy_async cuda_memcpy_sync cuda_memset_sync cuda_api_sync gpu_gaps gpu_time_util"
TIGHT="cuda_memcpy_async:rows=5,cuda_memcpy_sync:rows=5,cuda_memset_sync:rows=5,cuda_api_sync:rows=5,\
gpu_gaps:gap=1:rows=5,gpu_time_util:threshold=80:chunks=97:rows=5"
{
  "$NSYS" --version
  "$NSYS" analyze --help-rules ALL
  export NSYS gold SPECS="$(echo $RULES | tr ' ' ','),$TIGHT"
  ls "$work"/*.sqlite | xargs -P "$(nproc)" -I{} bash -c \
    'db={}; stem=$(basename "$db" .sqlite); "$NSYS" analyze -r "$SPECS" --format csv \
       --force-overwrite true --output "$gold/$stem" "$db" > "$db.out" 2>&1 || echo "$stem: rc=$?"; \
     grep "SKIPPED" "$db.out" | sed "s|^|$stem: |" | head -3'
  ls "$gold" | wc -l
  # what nsys 2025 does with nsys 2022.4's rule names, and its SKIPPED lines for an export without
  # greenContextId / ENUM_CUDA_MEM_KIND (hpcprof takes those messages from the rule scripts)
  one=$(ls "$work"/*.sqlite | head -1)
  echo "== 2022.4 names"; "$NSYS" analyze -r cuda-sync-memcpy,gpu-starv --format csv "$one" 2>&1 | head -20
  for drop in "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN greenContextId" "DROP TABLE ENUM_CUDA_MEM_KIND"; do
    cp "$one" "$work/old_schema.sqlite"
    python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()" \
      "$work/old_schema.sqlite" "$drop"
    echo "== $drop"; "$NSYS" analyze -r cuda_memcpy_sync,cuda_memset_sync --format csv "$work/old_schema.sqlite" 2>&1 \
      | grep SKIPPED
  done
} > "$OUT_DIR/nsys_rules_gold.log" 2>&1
tar -C "$gold" -cJf "$OUT_DIR/rules_gold.tar.xz" .
tail -20 "$OUT_DIR/nsys_rules_gold.log"
