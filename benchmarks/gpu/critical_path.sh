#!/bin/bash
# On 2 GPUs: the critical path across ranks against a known straggler.
# critical_path_delay.py makes rank 1 run 2 extra matmuls inside `matmul2` in timed iterations 5 and 11
# (their GPU time measured with CUDA events); run under nsys on both ranks, then under torch.profiler.
# Expected (checked at the end, PASS/FAIL lines in OUT/critical_path.txt): in iterations 5 and 11 the
# table names rank 1, `matmul2`, the ReduceScatter, and a held_ns within 10 % + 20 µs of the measured
# extra time; every other iteration waits less than a tenth of it; 16 iterations; NCCL kernels per rank equal.
# Needs (carried, git-ignored) .gpu/whl + .gpu/whl2 and .gpu/libs, as e2e_hpcprof.sh. Usage: bash critical_path.sh OUT
set -u
OUT_DIR=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT_DIR" /tmp/site /tmp/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .gpu/whl*/*.whl)
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nsys >/dev/null || ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$PATH NSYS=nsys NSYS_ARGS="-t cuda,nvtx --sample=none --cpuctxsw=none"
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  set -x
  TOOL=nsys TAG=cp PROFILE_DIR="$OUT_DIR/nsys" bash benchmarks/gpu/launch.sh 2 \
    python3 benchmarks/gpu/critical_path_delay.py --out "$OUT_DIR/delays_nsys.json"
  for rep in "$OUT_DIR"/nsys/*.nsys-rep; do nsys export -t sqlite --force-overwrite true -o "${rep%.nsys-rep}.sqlite" "$rep"; done
  TOOL=torch PROFILE_DIR="$OUT_DIR/torch" bash benchmarks/gpu/launch.sh 2 \
    python3 benchmarks/gpu/critical_path_delay.py --out "$OUT_DIR/delays_torch.json"
  python3 -m hpcprof nsys critical-path "$OUT_DIR"/nsys/cp_rank*.sqlite --format csv -o "$OUT_DIR/nsys_critical_path.csv"
  python3 -m hpcprof nsys critical-path "$OUT_DIR"/nsys/cp_rank*.sqlite --segments --format csv -o "$OUT_DIR/nsys_segments.csv"
  python3 -m hpcprof trace critical-path "$OUT_DIR"/torch --format csv -o "$OUT_DIR/torch_critical_path.csv"
  set +x
} > "$OUT_DIR/critical_path.log" 2>&1
python3 - "$OUT_DIR" <<'EOF' | tee "$OUT_DIR/critical_path.txt"
import json, sys
from pathlib import Path
import pandas as pd
from hpcprof.analysis.critical_path import critical_path_sentence
out = Path(sys.argv[1])
for tool in ("nsys", "torch"):
    delays = {int(k): v for k, v in json.loads((out / f"delays_{tool}.json").read_text()).items()}
    rows = pd.read_csv(out / f"{tool}_critical_path.csv", keep_default_na=False).set_index("iteration")
    print(f"{tool}: {len(rows)} iterations (expected 16), measured extra matmul2 time on rank 1: {delays}")
    for it, row in rows.iterrows():
        print(f"  {critical_path_sentence(row.to_dict() | {'iteration': it})}")
    for it, extra in delays.items():
        r = rows.loc[it]
        ok = (r["critical_rank"], r["held_by"], r["collective"]) == (1, "matmul2", "ReduceScatter") \
            and abs(r["held_ns"] - extra) <= 0.1 * extra + 20_000
        print(f"{'PASS' if ok else 'FAIL'} {tool} iteration {it}: held_ns {r['held_ns']:.0f} vs measured {extra}")
    quiet = rows.drop(index=list(delays))["held_ns"].max()
    print(f"{'PASS' if quiet < 0.1 * min(delays.values()) else 'FAIL'} {tool} other iterations: max held_ns {quiet:.0f}")
EOF
