#!/bin/bash
# The local half of window_campaign.sh, as campaign_report.sh is campaign.sh's: unpack the GPU
# machine's workdir at its path (/tmp/hpcprof-window, the store's run_dir), collect it here from the nsys
# SQLite exports it holds (no nsys needed), and write under benchmarks/gpu/results/:
#   window_collect.log, window_status.txt         collect (exit 3 expected: the never-opened run) and status
#   compare_window-seqpar_verdicts.{txt,csv}      the seqpar sweep against its first float32 run
#   report_window-seqpar.html                     the HTML report (5 MB: plotly inline; not committed)
#   findings_window-seqpar.txt                    its findings as text, with the number of figures
#   report_window-seqpar.png                      headless Chromium, 1400 px wide: the first screen
#   report_window-seqpar_sections.png             every section down to the runs appendix, 1400 x 4400 px
#   bash benchmarks/gpu/window_report.sh OUT/window-runs.tar.gz
# PYTHON picks the interpreter (default .venv/bin/python; e.g. PYTHON=/work/venv/bin/python PYTHONPATH=$PWD).
set -euo pipefail
TARBALL=${1:?window-runs.tar.gz from window_campaign.sh}
REPO=$(pwd)
DEST=$REPO/benchmarks/gpu/results
WORK=/tmp/hpcprof-window
PY=${PYTHON:-$REPO/.venv/bin/python}
HP=("$PY" -m hpcprof)
[ -e "$WORK" ] && { echo "$WORK exists: move it away first" >&2; exit 2; }
command -v chromium >/dev/null || { echo "chromium not found: tests/services/chromium.sh installs it" >&2; exit 2; }
mkdir -p "$DEST" "$WORK"
tar -C "$WORK" -xzf "$TARBALL"
"${HP[@]}" collect --workdir "$WORK" > "$DEST/window_collect.log" 2>&1 || echo "collect: exit $? (3 expected)"
sed -i "s#$WORK/##g" "$DEST/window_collect.log"
"${HP[@]}" status --workdir "$WORK" --format json | "$PY" -c '
import json, sys
for row in json.load(sys.stdin):
    print(row["experiment"], row["run"], row["state"], row.get("collected", ""), sep="  ")' > "$DEST/window_status.txt"
cat "$DEST/window_status.txt"

screenshot() {  # screenshot HTML PNG WIDTH,HEIGHT
  local profile
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --virtual-time-budget=15000 \
    --hide-scrollbars --window-size="$3" --screenshot="$2" "file://$1" 2>/dev/null
  rm -rf "$profile"
}

exp=window-seqpar
first=$(ls "$WORK/$exp" | head -n 1)
sweep=${first%-p[0-9]*}
"${HP[@]}" compare "$sweep" --workdir "$WORK" --baseline "$first" -o "$DEST/compare_${exp}_verdicts.txt"
"${HP[@]}" compare "$sweep" --workdir "$WORK" --baseline "$first" --format csv -o "$DEST/compare_${exp}_verdicts.csv"
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
screenshot "$DEST/report_$exp.html" "$DEST/report_${exp}_sections.png" 1400,4400
ls -la "$DEST"
