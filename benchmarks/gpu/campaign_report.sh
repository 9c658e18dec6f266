#!/bin/bash
# The local half of campaign.sh: unpack the GPU machine's workdir at its path, collect it here (nsys SQLite
# exports are in the tarball: no nsys needed), and write under benchmarks/gpu/campaign/ the
# comparisons (table and CSV, with 95 % confidence intervals and verdicts against each sweep's first
# point), the HTML report of each sweep, its findings as text (findings_<exp>.txt, with the number of
# figures) and two Chromium screenshots of it (the first screen, and the whole report: *_full.png).
#   bash benchmarks/gpu/campaign_report.sh OUT/campaign-runs.tar.gz
# PYTHON picks the interpreter (default .venv/bin/python; e.g. PYTHON=/work/venv/bin/python PYTHONPATH=$PWD).
set -euo pipefail
TARBALL=${1:?campaign-runs.tar.gz from campaign.sh}
REPO=$(pwd)
DEST=$REPO/benchmarks/gpu/campaign
WORK=/tmp/hpcprof-campaign   # the path of the runs (and of the store's run_dir) on the GPU machine
PY=${PYTHON:-$REPO/.venv/bin/python}
HP=("$PY" -m hpcprof)
[ -e "$WORK" ] && { echo "$WORK exists: move it away first" >&2; exit 2; }
mkdir -p "$DEST" "$WORK"
tar -C "$WORK" -xzf "$TARBALL"
"${HP[@]}" collect --workdir "$WORK" > "$DEST/collect.log" 2>&1 || echo "collect: exit $? (3: partly; see $DEST/collect.log)"
tail -n 5 "$DEST/collect.log"

screenshot() {  # screenshot HTML PNG WIDTH,HEIGHT
  local profile
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --virtual-time-budget=15000 \
    --window-size="$3" --screenshot="$2" "file://$1" 2>/dev/null
  rm -rf "$profile"
}

for exp in seqpar-polaris echo-slowdown; do
  first=$(ls "$WORK/$exp" | head -n 1)
  sweep=${first%-p[0-9]*}
  "${HP[@]}" compare "$sweep" --workdir "$WORK" --baseline "$first" -o "$DEST/compare_$exp.txt"
  "${HP[@]}" compare "$sweep" --workdir "$WORK" --baseline "$first" --format csv -o "$DEST/compare_$exp.csv"
  "${HP[@]}" report "$sweep" --workdir "$WORK" > "$DEST/report_$exp.txt"
  "${HP[@]}" report "$sweep" --workdir "$WORK" --html "$DEST/report_$exp.html" --baseline "$first"
  "$PY" -c '
import html, re, sys
text = open(sys.argv[1]).read()
print(re.search(r"data-figures=.(\d+).", text).group(1), "figures")
section = re.search(r"<section id=.findings.>(.*?)</section>", text, re.S).group(1)
for item in re.findall(r"<li>(.*?)</li>", section, re.S):
    print("-", html.unescape(re.sub(r"<[^>]+>", "", item)))
' "$DEST/report_$exp.html" > "$DEST/findings_$exp.txt"
  cat "$DEST/findings_$exp.txt"
  screenshot "$DEST/report_$exp.html" "$DEST/report_$exp.png" 1400,2400
  screenshot "$DEST/report_$exp.html" "$DEST/report_${exp}_full.png" 1400,14000
  gzip -9nf "$DEST/report_$exp.html"  # 5-6 MB of inline plotly: kept as .html.gz
done
sweep=$(ls "$WORK/echo-slowdown" | tail -n 1)
"$PY" - "$WORK/echo-slowdown/$sweep" "$DEST/echo_slowdown_ws2.xlsx" <<'EOF'
import sys
from pathlib import Path

from hpcprof.tools.nsys.analysis.echo import write_echo
from hpcprof.run.results import read_table

table = read_table(Path(sys.argv[1]), "echo_slowdown")
for path in write_echo(table, Path(sys.argv[2])):
    print("wrote", path)
EOF
ls -la "$DEST"
