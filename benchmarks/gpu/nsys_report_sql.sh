#!/bin/bash
# The SQL of nsys 2025.3.1's `nsys stats` reports: copies the report scripts shipped next to
# the nsys binary on the GPU machine (reports/*.py and their helpers nsysstats.py, kernel_helper.py, ...)
# to OUT/nsys_reports_2025.3.1/, with OUT/nsys_report_sql.log listing what was found.
# Their ORDER BY / GROUP BY clauses decide the row order and ties hpcprof must reproduce.
# Usage (from the repository root on the GPU machine): bash benchmarks/gpu/nsys_report_sql.sh $OUT
set -u
OUT_DIR=${1:?output directory}
NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
         /usr/local/cuda*/bin/nsys 2>/dev/null | head -1)
[ -n "$NSYS" ] || NSYS=$(command -v nsys)
[ -n "$NSYS" ] || { echo "nsys_report_sql.sh: no nsys found" >&2; exit 1; }
dest=$OUT_DIR/nsys_reports_2025.3.1
mkdir -p "$dest"
root=$(dirname "$(readlink -f "$NSYS")")
{
  "$NSYS" --version
  echo "nsys: $NSYS"
  # the reports folder sits beside nsys (target-linux-x64/reports) or one level up
  for dir in $(find "$root" "$root/.." -maxdepth 3 -type d -name reports 2>/dev/null | sort -u); do
    echo "reports folder: $dir"
    find "$dir" -maxdepth 1 -name '*.py' -exec cp {} "$dest/" \;
  done
  # helpers the report scripts import (nsysstats.py, kernel_helper.py, ...)
  find "$root" "$root/.." -maxdepth 4 \( -name nsysstats.py -o -name kernel_helper.py -o -name 'nvtx_helper*.py' \) \
       -exec cp {} "$dest/" \; 2>/dev/null
  ls "$dest" | wc -l
  ls "$dest"
} > "$OUT_DIR/nsys_report_sql.log" 2>&1
tar -C "$OUT_DIR" -czf "$OUT_DIR/nsys_reports_2025.3.1.tar.gz" nsys_reports_2025.3.1
tail -5 "$OUT_DIR/nsys_report_sql.log"
