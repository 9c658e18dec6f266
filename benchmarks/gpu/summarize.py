"""Tables for RESULTS.md from the files run_all.sh brought back (benchmarks/gpu/data/run*/).

    python benchmarks/gpu/summarize.py benchmarks/gpu/data
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

PHASES = ["allgather", "matmul1", "matmul2", "reduce_scatter", "iteration"]


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def rank_medians(result: dict[str, Any]) -> pd.DataFrame:
    """Median time per (rank, phase) over the timed iterations (seqpar) or counted steps (ddp)."""
    rows = pd.DataFrame(result.get("iterations") or result["steps"])
    if "counted" in rows:
        rows = rows[rows["counted"] & ~rows["iteration"].eq(result["window"]["iteration"])]
    return rows.groupby(["rank", "phase"])["time_ms"].median().unstack("phase")


def seqpar_table(data: Path) -> str:
    lines = [
        "| run | p | precision | allgather ms | matmul1 ms | matmul2 ms | reduce_scatter ms | iteration ms "
        "| matmul1/2 TFLOP/s | AG / RS busbw GB/s | check rel. error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(data.glob("run*/seqpar/*/seqpar.json")):
        res = load(path)
        cfg = res["config"]
        ph = {row["phase"]: row for row in res["phases"]}
        check = max(c["rel_error"] for c in res["check"]) if res["check"] else None
        lines.append(
            f"| {path.parent.parent.parent.name}/{path.parent.name} | {cfg['world_size']} | {cfg['precision']} | "
            + " | ".join(f"{ph[p]['median_ms']:.3f}" for p in PHASES)
            + f" | {ph['matmul1']['tflops_median']:.0f} / {ph['matmul2']['tflops_median']:.0f}"
            + (
                f" | {ph['allgather']['busbw_GBps_median']:.1f} / {ph['reduce_scatter']['busbw_GBps_median']:.1f}"
                if cfg["world_size"] > 1
                else " | n/a (p=1)"
            )
            + (f" | {check:.2e} |" if check is not None else " | |")
        )
    return "\n".join(lines)


def matmul_table(data: Path) -> str:
    """seqpar's matmul medians as a percentage of the standalone medians (same shapes)."""
    standalone = []
    for path in sorted(data.glob("run*/standalone/matmul*.json")):
        for row in load(path)["rows"]:
            standalone.append({**row, "file": f"{path.parent.parent.name}/{path.name}", "order": row.get("order", "blocked")})
    sa = pd.DataFrame(standalone)
    lines = [
        "| seqpar run | p | precision | phase | seqpar median ms | standalone median ms (file, order) | seqpar throughput / standalone |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted(data.glob("run*/seqpar/*/seqpar.json")):
        name = path.parent.name
        if not (name.startswith("base") or name.startswith("repeat")):
            continue
        res = load(path)
        cfg = res["config"]
        ph = {row["phase"]: row for row in res["phases"]}
        for phase in ("matmul1", "matmul2"):
            ref = sa[(sa["ranks"] == cfg["world_size"]) & (sa["precision"] == cfg["precision"]) & (sa["phase"] == phase)]
            ours = ph[phase]["median_ms"]
            refs = ", ".join(f"{r.median_ms:.3f} ({r.file}, {r.order})" for r in ref.itertuples())
            ratios = [r.median_ms / ours * 100 for r in ref.itertuples()]
            lines.append(
                f"| {path.parent.parent.parent.name}/{name} | {cfg['world_size']} | {cfg['precision']} | {phase} | {ours:.3f} "
                f"| {refs} | {min(ratios):.0f}–{max(ratios):.0f} % |"
            )
    return "\n".join(lines)


def collective_table(data: Path) -> str:
    lines = [
        "| precision | collective | bytes | seqpar busbw GB/s (base, base2, mpi) | standalone busbw GB/s per-call / batched | seqpar / standalone per-call |",
        "|---|---|---|---|---|---|",
    ]
    sa = pd.DataFrame(load(next(data.glob("run1/standalone/collective_p2.json")))["rows"])
    for row in sa.itertuples():
        ours = []
        for name in ("run1/seqpar/base_{}_p2", "run1/seqpar/base2_{}_p2", "run2/seqpar/mpi_{}_p2"):
            path = data / name.format(row.precision) / "seqpar.json"
            if path.exists():
                ph = {r["phase"]: r for r in load(path)["phases"]}
                ours.append(ph[row.phase]["busbw_GBps_median"])
        ratio = ", ".join(f"{x / row.busbw_GBps_median * 100:.1f} %" for x in ours)
        lines.append(
            f"| {row.precision} | {row.phase} | {row.bytes / 1e6:.1f} MB | {', '.join(f'{x:.1f}' for x in ours)} "
            f"| {row.busbw_GBps_median:.1f} / {row.busbw_GBps_batched:.1f} | {ratio} |"
        )
    return "\n".join(lines)


def ratio_table(data: Path, pairs: list[tuple[str, str, str]]) -> str:
    """Per-rank phase medians of `run` over `base`, in percent (100 = no change)."""
    lines = ["| comparison | rank | " + " | ".join(PHASES) + " |", "|---|---|" + "---|" * len(PHASES)]
    for label, run, base in pairs:
        ours, ref = rank_medians(load(data / run / "seqpar.json")), rank_medians(load(data / base / "seqpar.json"))
        for rank in ours.index:
            cells = " | ".join(f"{ours.loc[rank, p] / ref.loc[rank, p] * 100:.1f} %" for p in PHASES)
            lines.append(f"| {label} | {rank} | {cells} |")
    return "\n".join(lines)


def ddp_table(data: Path) -> str:
    lines = [
        "| run | ranks | launcher | rank | forward ms | backward ms | optimizer ms | step ms | window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(data.glob("run*/ddp/*/ddp_steps.json")):
        res = load(path)
        med = rank_medians(res)
        win = res["window"]
        for rank in med.index:
            lines.append(
                f"| {path.parent.parent.parent.name}/{path.parent.name} | {res['config']['world_size']} | {res['versions']['launcher']} "
                f"| {rank} | "
                + " | ".join(f"{med.loc[rank, p]:.2f}" for p in ("forward", "backward", "optimizer", "step"))
                + f" | it {win['iteration']} (epoch {win['epoch']}, step {win['step']}), {win['mode']} |"
            )
    return "\n".join(lines)


def main(data: Path) -> None:
    print("### seqpar phase medians\n")
    print(seqpar_table(data))
    print("\n### matmul phases vs standalone matmuls\n")
    print(matmul_table(data))
    print("\n### collectives vs standalone loop\n")
    print(collective_table(data))
    print("\n### nsys on every rank vs unprofiled (phase medians, 100 % = same)\n")
    print(
        ratio_table(
            data,
            [
                (f"nsys/base {prec} p{p}", f"run1/seqpar/nsys_{prec}_p{p}", f"run1/seqpar/base_{prec}_p{p}")
                for p in (1, 2)
                for prec in ("float32", "bfloat16")
            ],
        )
    )
    print("\n### nsys on rank 0 only: unprofiled rank 1 vs unprofiled runs\n")
    print(
        ratio_table(
            data,
            [
                ("slowdown/base bf16 p2", "run1/seqpar/slowdown_bfloat16_p2", "run1/seqpar/base_bfloat16_p2"),
                ("slowdown/base2 bf16 p2", "run1/seqpar/slowdown_bfloat16_p2", "run1/seqpar/base2_bfloat16_p2"),
                ("base2/base (noise) bf16 p2", "run1/seqpar/base2_bfloat16_p2", "run1/seqpar/base_bfloat16_p2"),
            ],
        )
    )
    print("\n### ddp (Echo GPT-2, fp32): medians over counted steps, window step left out\n")
    print(ddp_table(data))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data"))
