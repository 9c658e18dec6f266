#!/bin/bash
# NCCL's NVTX payloads in an nsys export (busbw per collective): ddp_blobs.py on 2 GPUs under
# torchrun, each rank under nsys (cuda,nvtx), exported with and without --include-blobs; writes
# OUT/rank{0,1}.sqlite.xz (with blobs), OUT/buckets.json and OUT/versions.txt.
#   bash benchmarks/gpu/busbw/ddp_blobs.sh OUT      (needs .gpu/libs: shared/tools/gpu-nsys-libs.sh)
set -eu
OUT=${1:?output directory}
REPO=$(pwd)
mkdir -p "$OUT" /tmp/bin /tmp/blobs
export LD_LIBRARY_PATH=$REPO/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ln -sf "$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)" /tmp/bin/nsys
export PATH=/tmp/bin:$PATH NCCL_NVLS_ENABLE=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version; } > "$OUT/versions.txt"
cd /tmp/blobs
torchrun --nproc-per-node 2 --no-python bash -c \
  'nsys profile --trace=cuda,nvtx --force-overwrite=true -o /tmp/blobs/rank$RANK python3 '"$REPO"'/benchmarks/gpu/busbw/ddp_blobs.py '"$OUT"
for r in 0 1; do
  nsys export --type sqlite --include-blobs=true --force-overwrite=true -o "rank$r.sqlite" "rank$r.nsys-rep"
  sqlite3 "rank$r.sqlite" "select count(*), count(binaryData) from NVTX_EVENTS" 2>/dev/null \
    || python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*), count(binaryData) from NVTX_EVENTS').fetchone())" "rank$r.sqlite"
  xz -9 -T0 -c "rank$r.sqlite" > "$OUT/rank$r.sqlite.xz"
done
nsys export --help | grep -i -A2 blob || true
ls -la "$OUT"
