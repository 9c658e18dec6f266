#!/bin/bash
# Forensics on the lent 2-GPU machine: plant_nccl.py's hang and exception under NCCL with the Flight
# Recorder, and the exception under nsys; hpcprof's status, report and `logs --hang` of each, and
# the dumps' sizes.   bash benchmarks/gpu/forensics.sh OUT [FAULT:TOOL...]   (default: hang:none
# exception:none exception:nsys; after trainers.sh's set-up, or alone: the same .gpu/whl and .gpu/libs)
set -u
OUT_DIR=${1:?output directory}
shift
[ $# -gt 0 ] && CASES=("$@") || CASES=(hang:none exception:none exception:nsys)
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin /tmp/forensics
[ -d /tmp/site/msgspec ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$(dirname "$(command -v python3)"):$PATH
WORKDIR=/tmp/forensics-runs
cp "$REPO/benchmarks/gpu/forensics/plant_nccl.py" /tmp/forensics/
cd /tmp/forensics
EXP=$REPO/benchmarks/gpu/forensics/plant.yaml
SITE=$REPO/benchmarks/gpu/site-torchrun-x2.yaml
{
  for case in "${CASES[@]}"; do
    set -- ${case/:/ }
    echo "== $1 under ${2}"
    python3 -m hpcprof submit "$EXP" --site-file "$SITE" --workdir "$WORKDIR" --wait \
      --set "workload.argv=[python3, plant_nccl.py, $1, '20', '45']" --set "profile.tool=$2"
    run=$(ls -t "$WORKDIR/forensics-nccl" | head -1)
    python3 -m hpcprof status --workdir "$WORKDIR" "$run" --format json
    python3 -m hpcprof logs --workdir "$WORKDIR" "$run" --hang
    python3 -m hpcprof report --workdir "$WORKDIR" "$run"
    echo "dumps:"; ls -l "$WORKDIR/forensics-nccl/$run/forensics" | awk 'NR > 1 {print "  " $5, $9}'
  done
  python3 -m hpcprof collect --workdir "$WORKDIR"
} > "$OUT_DIR/forensics.txt" 2>&1
cd "$REPO"
cat "$OUT_DIR/forensics.txt" | grep -v "^WARNING: Target" | tail -n 120
