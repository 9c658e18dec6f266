#!/bin/bash
# nsys 2025.3.1's `nsys analyze` with the rule options the first gold (nsys_rules_gold.sh: defaults and
# rows=5) lacks, on the generated rules exports of seeds FIRST .. FIRST+COUNT-1: per export the option
# sets of tests/differential/nsys_rules_exports.option_sets: a start/end window with rows=-1, nvtx=NAME,
# nvtx=NAME/1 (its second range), process=PID, thread=TID. Writes OUT/rules_options_gold.tar.xz holding
# <stem>.<set>_<rule>[_<args>].csv, and for nvtx_second (a '/' cannot be in nsys's file name)
# <stem>.nvtx_second_<rule>.out/.err: nsys's stdout/stderr with `-o -`; OUT/nsys_rules_gold_options.log.
# Needs .gpu/libs carried (libdw/libelf, shared/tools/gpu-nsys-libs.sh).
# Usage: bash benchmarks/gpu/nsys_rules_gold_options.sh FIRST COUNT OUT     (e.g. 1000 120 $OUT)
set -u
FIRST=${1:?first seed}; COUNT=${2:?number of seeds}; OUT_DIR=${3:?output directory}
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH=$PWD/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
work=$(mktemp -d); gold=$work/gold; mkdir -p "$gold"
python3 tests/differential/nsys_rules_exports.py tests/fixtures "$work" "$FIRST" "$COUNT" || exit 1
one_export() {
  db=$1; stem=$(basename "$db" .sqlite)
  for set in window nvtx process thread; do
    specs=$(python3 tests/differential/nsys_rules_exports.py --specs "$db" "$set" | paste -sd,)
    "$NSYS" analyze -r "$specs" --format csv --force-overwrite true --output "$gold/$stem.$set" "$db" \
      > "$gold/$stem.$set.log" 2>&1 || echo "$stem $set: rc=$?"
  done
  python3 tests/differential/nsys_rules_exports.py --specs "$db" nvtx_second | while read -r spec; do
    "$NSYS" analyze -r "$spec" --format csv --output - "$db" > "$gold/$stem.nvtx_second_${spec%%:*}.out" \
      2> "$gold/$stem.nvtx_second_${spec%%:*}.err" || echo "$stem $spec: rc=$?"
  done
}
export -f one_export; export NSYS gold
{
  "$NSYS" --version
  ls "$work"/*.sqlite | wc -l
  ls "$work"/*.sqlite | xargs -P "$(nproc)" -I{} bash -c 'one_export {}'
  ls "$gold" | wc -l
  cat "$gold"/$(ls "$gold" | grep '\.window\.log$' | head -1)
  head -c 2000 "$(ls "$gold"/*.nvtx_second_cuda_api_sync.out | head -1)"
} > "$OUT_DIR/nsys_rules_gold_options.log" 2>&1
tar -C "$gold" -cJf "$OUT_DIR/rules_options_gold.tar.xz" .
tail -30 "$OUT_DIR/nsys_rules_gold_options.log"
