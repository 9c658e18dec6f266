#!/bin/bash
# nsys 2025.3.1's NVTX parents (the NVTX_PARENT table its nvtx_gpu_proj_* reports build in an R*Tree) on
# generated exports of the projection seeds, with its SQLite's version and settings: a copy of its
# nvtx_gpu_proj_trace.py whose final query reads that table is put in its reports folder and run.
# hpcprof.tools.nsys.stats.projection._parents is compared with these (benchmarks/gpu/results/nvtx_parent_probe.txt).
# Usage (GPU machine, repository root, .gpu/libs carried): bash benchmarks/gpu/nvtx_parent_probe.sh OUT
OUT=$1; export LD_LIBRARY_PATH=$PWD/.gpu/libs
NSYS=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)
DIR=$(dirname "$NSYS")/reports
python3 - "$DIR" <<'PY'
import sys, pathlib
d = pathlib.Path(sys.argv[1]); s = (d / "nvtx_gpu_proj_trace.py").read_text()
old = "self.query = self.query_stub.format(GPU_OPS_ALL = union)"
assert old in s
new = '''self.query = """SELECT p.rangeId, p.parentId, p.tightness, sqlite_version() AS version,
    (SELECT page_size FROM pragma_page_size) AS page_size,
    (SELECT count(*) FROM temp.NVTX_EVENTS_RIDX_node) AS nodes,
    (SELECT group_concat(compile_options, ' ') FROM pragma_compile_options) AS options
FROM temp.NVTX_PARENT AS p ORDER BY 1"""'''
(d / "nvtx_parent_probe.py").write_text(s.replace(old, new))
PY
W=$(mktemp -d)
for s in 2002 2032 2098 2128 2140 2170 2204 2285 2330 2384 2000 2001; do python3 tests/differential/nsys_exports.py tests/fixtures $W $s 1; done
for f in $W/*.sqlite; do
  "$NSYS" stats --report nvtx_parent_probe --format csv --force-overwrite true --output "$OUT/$(basename $f .sqlite)" "$f" > "$OUT/$(basename $f .sqlite).log" 2>&1
done
tar -C $OUT -czf /tmp/nvtx_parent_probe.tgz . && rm -rf $OUT/* && mv /tmp/nvtx_parent_probe.tgz $OUT/
