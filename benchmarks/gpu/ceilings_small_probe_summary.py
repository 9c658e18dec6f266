"""The tables of benchmarks/gpu/ceilings_small_probe.sh's output: per collective and size (1-16 MiB), nccl-tests'
best busbw of its 5 cycles in each section (A: under mpirun as ceilings.sh, B: --bind-to none, C: -I 1; G: each
size alone, per way) beside hpcprof's (D: torchrun, E: mpirun) for the same way. AG and RS: out-of-place busbw,
AR: in-place (as ceilings_compare.py). Usage: python3 ceilings_small_probe_summary.py OUT"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

API = "NCCL's API"
#: section G's (nccl-tests -R, -G) beside hpcprof's way of the same buffers and launches
WAYS = [("plain, one by one", "0", "0", f"{API}, calls launched one by one"),
        ("plain, graph", "0", "10", f"{API}, one CUDA graph of the calls"),
        ("symmetric, one by one", "2", "0", f"{API}, symmetric windows, calls launched one by one"),
        ("symmetric, graph", "2", "10", f"{API}, symmetric windows, one CUDA graph of the calls")]


def sections(log: str) -> dict[tuple[str, ...], float]:
    """(section, op, bytes[, -R, -G]) -> nccl-tests' best busbw of the section's lines."""
    best: dict[tuple[str, ...], float] = {}
    key: tuple[str, ...] | None = None
    for line in log.splitlines():
        if line.startswith("== "):
            if (g := re.match(r"== G (\w+) (\d+)M -R (\d) -G (\d+)", line)) is not None:
                key = ("G", g[1], str(int(g[2]) << 20), g[3], g[4])
            elif (abc := re.match(r"== ([ABC]) (\w+)", line)) is not None:
                key = (abc[1], abc[2])
            else:
                key = None
            continue
        fields = line.split()
        if key is None or len(fields) < 12 or not fields[0].isdigit() or fields[2] != "float":
            continue
        op = key[1]
        in_place = 15 if key[0] == "C" else 11          # -I 1 adds four columns to each half
        value = float(fields[in_place if op == "all_reduce" else 7])
        full = key if key[0] == "G" else (*key, fields[0])
        best[full] = max(best.get(full, 0.0), value)
    return best


def main(out: Path) -> int:
    best = sections((out / "probe.log").read_text())
    hp = {name: {(r["op"], str(r["bytes"])): r for r in json.loads((out / f"{name}.json").read_text())["rows"]}
          for name in ("D", "E") if (out / f"{name}.json").exists()}
    rows = sorted(hp.get("D", {}).items(), key=lambda kv: (kv[0][0], int(kv[0][1])))
    if any(k[0] in "ABC" for k in best):
        print("one by one, unregistered buffers: nccl-tests A (mpirun, bound to a core) | B (--bind-to none) | "
              "C (-I 1: an event recorded per call, its host-timed busbw) | hpcprof D (torchrun) | E (mpirun, bound)")
        for (op, size), _ in rows:
            way = f"{API}, calls launched one by one"
            nt = [best.get((s, op, size), float("nan")) for s in "ABC"]
            mine = [hp[n][(op, size)]["ways"].get(way, float("nan")) if n in hp else float("nan") for n in "DE"]
            print(f"  {op:<15}{int(size) >> 20:>3} MiB  " + "  ".join(f"{v:7.2f}" for v in [*nt, *mine]))
    if any(k[0] == "G" for k in best):
        print("each size alone (nccl-tests -b S -e S) against hpcprof D, busbw GB/s: nccl-tests vs hpcprof (hpcprof / nccl-tests)")
        for (op, size), row in rows:
            parts = []
            for name, reg, graph, way in WAYS:
                theirs, mine = best.get(("G", op, size, reg, graph), float("nan")), row["ways"].get(way, float("nan"))
                parts.append(f"{name} {theirs:6.1f} vs {mine:6.1f} ({mine / theirs:5.3f})")
            theirs = max(v for k, v in best.items() if k[0] == "G" and k[1] == op and k[2] == size)
            print(f"  {op:<15}{int(size) >> 20:>3} MiB  " + " | ".join(parts)
                  + f" || best {theirs:6.1f} vs {row['busbw_GBps']:6.1f} ({row['busbw_GBps'] / theirs:5.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
