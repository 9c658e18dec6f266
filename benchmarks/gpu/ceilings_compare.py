"""hpcprof bench ceilings against nccl-tests (benchmarks/gpu/ceilings.sh): one line per size and op with
both bus bandwidths, their ratio and whether hpcprof's is within 5 % of nccl-tests'.

nccl-tests' lines: size count type redop root, then time algbw busbw #wrong out of place and the same
in place (src/common.cu); each size compares the ceilings both sides find: nccl-tests' faster of its runs
launched one by one and replayed from a CUDA graph (`-G`), hpcprof's fastest way (its row's `statistic`;
every way's busbw is printed below the table). AG and RS are compared with the out-of-place busbw (torch's
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
    """(size, dtype, graph) -> (out-of-place busbw, in-place busbw) in GB/s from *_perf outputs, the best of
    their cycles (`-N`, one line per size and cycle); graph: the run replayed its calls from a CUDA graph
    (`-G`, its header's `graph: N` above 0)."""
    rows: dict[tuple[int, str, bool], tuple[float, float]] = {}
    graph = False
    for line in path.read_text().splitlines():
        if (mode := re.search(r"graph: (\d+)", line)) is not None:
            graph = int(mode.group(1)) > 0
        fields = line.split()
        if len(fields) >= 12 and fields[0].isdigit() and fields[2] in TYPES:
            key, seen = (int(fields[0]), TYPES[fields[2]], graph), (float(fields[7]), float(fields[11]))
            best = rows.get(key, seen)
            rows[key] = (max(best[0], seen[0]), max(best[1], seen[1]))
    return rows


def main(out: Path) -> int:
    result = json.loads((out / "ceilings.json").read_text())
    print(f"hpcprof bench ceilings vs NVIDIA nccl-tests, {result['world_size']} ranks, {result['device_name']}, "
          f"torch {result['versions']['torch']}, NCCL {result['versions']['nccl']}, {result['created']}")
    print(f"{'size':>12} {'op':<15} {'dtype':<9} {'nccl-tests busbw':>17} {'(calls)':<22} {'hpcprof busbw':>14} "
          f"{'ratio':>7}  within 5 %  hpcprof's way")
    failed, ways = 0, []
    for row in result["rows"]:
        if row["kind"] != "collective":
            continue
        column = 1 if row["op"] == "all_reduce" else 0
        theirs = {}
        for buffers in ("", "registered", "symmetric"):  # ncclMemAlloc buffers; registered (-R 1),
            path = out / f"nccl_{row['op']}{'_' if buffers else ''}{buffers}.txt"   # as symmetric windows (-R 2)
            runs = nccl_tests(path) if path.exists() else {}
            theirs.update({f"{'graph' if graph else 'one by one'}{', ' if buffers else ''}{buffers}":
                           runs[(row["bytes"], row["dtype"], graph)][column] for graph in (False, True)
                           if (row["bytes"], row["dtype"], graph) in runs})
        if not theirs:
            print(f"{row['bytes']:>12} {row['op']:<15} {row['dtype']:<9} {'(not run)':>17}")
            failed += 1
            continue
        how, reference = max(theirs.items(), key=lambda item: item[1])
        ratio = row["busbw_GBps"] / reference
        ok = abs(ratio - 1) <= TOLERANCE
        failed += not ok
        print(f"{row['bytes']:>12} {row['op']:<15} {row['dtype']:<9} {reference:>17.2f} "
              f"{'(' + how + ')':<22} {row['busbw_GBps']:>14.2f} {ratio:>7.3f}  "
              f"{'yes' if ok else 'no ':<10}  {row['statistic'].split('(')[1].split(')')[0]}")
        ways.append(f"{row['bytes']:>12} {row['op']:<15} {row['dtype']:<9} nccl-tests "
                    + ", ".join(f"{way} {busbw:.2f}" for way, busbw in theirs.items())
                    + "; hpcprof " + ", ".join(f"{way} {busbw:.2f}" for way, busbw in row.get("ways", {}).items()))
    print("every way, busbw GB/s:")
    print("\n".join(ways))
    for row in (r for r in result["rows"] if r["kind"] == "gemm"):
        print(f"gemm {row['m']}x{row['n']}x{row['k']} {row['dtype']}: {row['tflops']:.1f} TFLOP/s "
              f"(ranks {row['tflops_min_rank']:.1f} .. {row['tflops_max_rank']:.1f})")
    print(f"{'all' if not failed else failed} {'within 5 %' if not failed else 'not within 5 %'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
