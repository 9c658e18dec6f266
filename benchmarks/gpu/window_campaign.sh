#!/bin/bash
# The measured window and capture windows on the lent 2x H200 machine, all through `hpcprof submit` / `collect`:
#   1. seqpar float32 and bfloat16 on 2 ranks, 2 repetitions, nsys on every rank with
#      capture_range cudaProfilerApi: seqpar opens the range around its timed loop itself;
#   2. the same bfloat16 point with capture_range nvtx (nvtx_capture: timed);
#   3. Echo's GPT-2 DDP pair (examples/ddp_slowdown.yaml, GPT2_PRESET=gpt2) at world size 1 and 2;
#   4. a `command` workload that says it opens the range (profile.window.opened_by_program) but
#      never does: nsys records nothing, collect must name both ranks and exit 3.
# Then collect, compare and check (window_check.py): fp32 idle over the timed iterations < 10 %,
# the capture's idle reported beside it, every seqpar rank with a window of its timed iterations.
# Needs (carried, git-ignored) .gpu/whl (+ .gpu/libs for nsys), as campaign.sh.
# Usage, from the repository root: bash benchmarks/gpu/window_campaign.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
[ -d "$REPO/.gpu/libs" ] && export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nsys >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$PATH
export HPCPROF_WORKDIR=/tmp/hpcprof-window
SITE=benchmarks/gpu/site-h200x2.yaml
LEAN=(--set profile.nsys.sample=none --set profile.nsys.cpuctxsw=none --set profile.nsys.stats=false
      --set resources.nodes=1 --set resources.ranks_per_node=2 --set profile.ranks=all)
SEQPAR=(examples/seqpar_polaris.yaml --site-file "$SITE" --wait "${LEAN[@]}"
        --set workload.args.iterations=50 --set workload.args.warmup_iterations=10)
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  nsys --version
  set -x
  python3 -m hpcprof submit "${SEQPAR[@]}" --set name=window-seqpar --set repeat=2 \
    --set profile.nsys.capture_range=cudaProfilerApi --set profile.nsys.capture_range_end=stop
  python3 -m hpcprof submit "${SEQPAR[@]}" --set name=window-seqpar-nvtx --set 'sweep={}' \
    --set workload.args.precision=bfloat16 --set profile.nsys.capture_range=nvtx \
    --set profile.nsys.nvtx_capture=timed --set profile.nsys.capture_range_end=stop
  python3 -m hpcprof submit examples/ddp_slowdown.yaml --site-file "$SITE" --wait --set env.GPT2_PRESET=gpt2 \
    --set workload.args.batchsize=8 --set workload.args.epochs=2 --set workload.args.warmup_epochs=1 \
    --set workload.args.steps_per_epoch=12
  python3 -m hpcprof submit benchmarks/gpu/window_never_opened.yaml --site-file "$SITE" --wait
  for rep in "$HPCPROF_WORKDIR"/*/*/profiles/nsys/*.nsys-rep; do
    nsys export -t sqlite --force-overwrite true -o "${rep%.nsys-rep}.sqlite" "$rep" >/dev/null
  done
  python3 -m hpcprof collect --workers 4; echo "collect rc=$? (3 expected: window-never-opened)"
  python3 -m hpcprof status --format json
  sweep=$(ls "$HPCPROF_WORKDIR/window-seqpar" | head -n 1 | sed 's/-p[0-9]*$//')
  python3 -m hpcprof compare "$sweep" -o "$OUT_DIR/compare_window-seqpar.txt"
  python3 -m hpcprof compare "$sweep" --format csv -o "$OUT_DIR/compare_window-seqpar.csv"
  cat "$OUT_DIR/compare_window-seqpar.txt"
  python3 benchmarks/gpu/window_check.py "$HPCPROF_WORKDIR"; echo "window_check rc=$?"
  set +x
} > "$OUT_DIR/window_campaign.log" 2>&1
tar -C "$HPCPROF_WORKDIR" -czf "$OUT_DIR/window-runs.tar.gz" --exclude='*.nsys-rep' --exclude='derived' \
  --exclude='tmp' .
ls -la "$OUT_DIR"
tail -n 40 "$OUT_DIR/window_campaign.log"
