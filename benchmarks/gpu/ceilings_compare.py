"""hpcprof bench ceilings against nccl-tests (benchmarks/gpu/ceilings.sh): one line per size and op with
both bus bandwidths, their ratio and whether hpcprof's is within 5 % of nccl-tests'.

nccl-tests' lines: size count type redop root, then time algbw busbw #wrong out of place and the same
in place (src/common.cu); each size is compared with nccl-tests run the way hpcprof's ceiling ran its calls
(one by one, or replayed from a CUDA graph: `-G`), the `statistic` of hpcprof's row. AG and RS are compared with the out-of-place busbw (torch's
all_gather_into_tensor and reduce_scatter_tensor are out of place), AR with the in-place one.
Usage: python3 ceilings_compare.py OUT_DIR (reads OUT_DIR/nccl_<op>.txt and OUT_DIR/ceilings.json)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

TOLERANCE = 0.05
TYPES = {"float": "float32", "bfloat16": "bfloat16", "half": "float16"}


def nccl_tests(path: Path) -> dict[tuple[int, str, bool], tuple[float, float]]:
    """(size, dtype, graph) -> (out-of-place busbw, in-place busbw) in GB/s from *_perf outputs; graph: the
    run replayed its calls from a CUDA graph (`-G`, its header's `graph: N` above 0)."""
    rows: dict[tuple[int, str, bool], tuple[float, float]] = {}
    graph = False
    for line in path.read_text().splitlines():
        if (mode := re.search(r"graph: (\d+)", line)) is not None:
            graph = int(mode.group(1)) > 0
        fields = line.split()
        if len(fields) >= 12 and fields[0].isdigit() and fields[2] in TYPES:
            rows[(int(fields[0]), TYPES[fields[2]], graph)] = (float(fields[7]), float(fields[11]))
    return rows


def main(out: Path) -> int:
    result = json.loads((out / "ceilings.json").read_text())
    print(f"hpcprof bench ceilings vs NVIDIA nccl-tests, {result['world_size']} ranks, {result['device_name']}, "
          f"torch {result['versions']['torch']}, NCCL {result['versions']['nccl']}, {result['created']}")
    print(f"{'size':>12} {'op':<15} {'dtype':<9} {'calls':<10} {'nccl-tests busbw':>17} {'hpcprof busbw':>14} "
          f"{'ratio':>7}  within 5 %")
    failed = 0
    for row in result["rows"]:
        if row["kind"] != "collective":
            continue
        graph = "CUDA graph" in row["statistic"]      # like with like: hpcprof's way of running the calls
        theirs = nccl_tests(out / f"nccl_{row['op']}.txt").get((row["bytes"], row["dtype"], graph))
        if theirs is None:
            print(f"{row['bytes']:>12} {row['op']:<15} {row['dtype']:<9} {'(not run)':>17}")
            failed += 1
            continue
        reference = theirs[1] if row["op"] == "all_reduce" else theirs[0]
        ratio = row["busbw_GBps"] / reference
        ok = abs(ratio - 1) <= TOLERANCE
        failed += not ok
        print(f"{row['bytes']:>12} {row['op']:<15} {row['dtype']:<9} {'graph' if graph else 'one by one':<10} "
              f"{reference:>17.2f} {row['busbw_GBps']:>14.2f} {ratio:>7.3f}  {'yes' if ok else 'no'}")
    for row in (r for r in result["rows"] if r["kind"] == "gemm"):
        print(f"gemm {row['m']}x{row['n']}x{row['k']} {row['dtype']}: {row['tflops']:.1f} TFLOP/s "
              f"(ranks {row['tflops_min_rank']:.1f} .. {row['tflops_max_rank']:.1f})")
    print(f"{'all' if not failed else failed} {'within 5 %' if not failed else 'not within 5 %'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
