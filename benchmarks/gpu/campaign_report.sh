#!/bin/bash
# The local half of campaign.sh: unpack the GPU machine's workdir at its path, collect it here (nsys SQLite
# exports are in the tarball: no nsys needed), and write under benchmarks/gpu/campaign/ the
# comparisons (table and CSV), the HTML report of each sweep and a Chromium screenshot of it.
#   bash benchmarks/gpu/campaign_report.sh OUT/campaign-runs.tar.gz
set -euo pipefail
TARBALL=${1:?campaign-runs.tar.gz from campaign.sh}
REPO=$(pwd)
DEST=$REPO/benchmarks/gpu/campaign
WORK=/tmp/hpcprof-campaign   # the path of the runs (and of the store's run_dir) on the GPU machine
HP=("$REPO/.venv/bin/python" -m hpcprof)
[ -e "$WORK" ] && { echo "$WORK exists: move it away first" >&2; exit 2; }
mkdir -p "$DEST" "$WORK"
tar -C "$WORK" -xzf "$TARBALL"
"${HP[@]}" collect --workdir "$WORK" > "$DEST/collect.log" 2>&1 || echo "collect: exit $? (3: partly; see $DEST/collect.log)"
tail -n 5 "$DEST/collect.log"
for exp in seqpar-polaris echo-slowdown; do
  sweep=$(ls "$WORK/$exp" | head -n 1 | sed 's/-p[0-9]*$//')
  "${HP[@]}" compare "$sweep" --workdir "$WORK" -o "$DEST/compare_$exp.txt"
  "${HP[@]}" compare "$sweep" --workdir "$WORK" --format csv -o "$DEST/compare_$exp.csv"
  "${HP[@]}" report "$sweep" --workdir "$WORK" > "$DEST/report_$exp.txt"
  "${HP[@]}" report "$sweep" --workdir "$WORK" --html "$DEST/report_$exp.html"
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --virtual-time-budget=15000 \
    --window-size=1400,3000 --screenshot="$DEST/report_$exp.png" "file://$DEST/report_$exp.html" 2>/dev/null
  rm -rf "$profile"
done
sweep=$(ls "$WORK/echo-slowdown" | tail -n 1)
"$REPO/.venv/bin/python" - "$WORK/echo-slowdown/$sweep" "$DEST/echo_slowdown_ws2.xlsx" <<'EOF'
import sys
from pathlib import Path

from hpcprof.analysis.nsys.echo import write_echo
from hpcprof.results import read_table

table = read_table(Path(sys.argv[1]), "echo_slowdown")
for path in write_echo(table, Path(sys.argv[2])):
    print("wrote", path)
EOF
ls -la "$DEST"
