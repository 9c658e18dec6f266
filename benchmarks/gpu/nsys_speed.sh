#!/bin/bash
# On the GPU machine (16 cores, nsys 2025.3.1, the newest nsys we can run): `hpcprof nsys stats`
# against `nsys stats` of that version on the same machine.
#   - a per-rank export: start-up of one and of the six summary reports (benchmarks/startup.py);
#   - large exports: the six summary reports, current names (benchmarks/nsys_stats_speed.py --names new),
#     H200 seqpar rank x15000 and nsys-ai x250, outputs checked byte-identical.
# Needs .gpu/whl (wheels the GPU image lacks) and .gpu/libs (libdw/libelf for nsys) carried.
# Usage: bash benchmarks/gpu/nsys_speed.sh OUT_DIR
set -u
OUT=$(mkdir -p "${1:?output dir}" && cd "$1" && pwd)
REPO=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
mkdir -p /tmp/nsys-bin && ln -sf "$NSYS" /tmp/nsys-bin/nsys
export PATH=/tmp/nsys-bin:$PATH
{ date -u; nproc; "$NSYS" --version; python3 --version; nvidia-smi -L; } > "$OUT/env.txt" 2>&1
python3 -m hpcprof --help > /dev/null                                    # byte-compile once
timeout 120 python3 benchmarks/startup.py --repeat 9 --out "$OUT/startup.txt" > /dev/null 2> "$OUT/startup.err"
timeout 200 python3 benchmarks/nsys_stats_speed.py --names new --nsys "$NSYS" --repeat 3 > "$OUT/speed_h200.txt" 2>&1
timeout 200 python3 benchmarks/nsys_stats_speed.py --names new --nsys "$NSYS" --repeat 2 \
  --source "$REPO/.fixtures/nsys/nsysai_mfu_2gpu_before.sqlite" --copies 250 > "$OUT/speed_nsysai.txt" 2>&1
tail -n 30 "$OUT"/*.txt "$OUT/startup.err"
