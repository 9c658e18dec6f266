"""Standalone matmuls of seqpar's shapes, timed the same way (one CUDA event pair per matmul).

For p ranks: matmul1 = [S, H] @ [H, H/p], matmul2 = [S, H/p] @ [H/p, H], 2*S*H*H/p flops each.
`--order interleaved` (default) alternates matmul1/matmul2 each iteration like seqpar; `blocked`
runs all iterations of matmul1, then of matmul2. One process, one GPU. Writes a JSON list of rows {ranks, precision, phase, median_ms, mean_ms, tflops_median}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


Operands = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def time_matmuls(products: dict[str, Operands], iterations: int, warmup: int, order: str) -> dict[str, list[float]]:
    """Per-call times (ms) of each product; `interleaved` alternates them per iteration as seqpar does,
    `blocked` runs all iterations of one product before the next."""
    groups = [list(products)] if order == "interleaved" else [[name] for name in products]
    times: dict[str, list[float]] = {}
    for names in groups:
        for _ in range(warmup):
            for name in names:
                torch.matmul(*products[name][:2], out=products[name][2])
        pairs: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {name: [] for name in names}
        for _ in range(iterations):
            for name in names:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.matmul(*products[name][:2], out=products[name][2])
                end.record()
                pairs[name].append((start, end))
        torch.cuda.synchronize()
        times.update({name: [s.elapsed_time(e) for s, e in pairs[name]] for name in names})
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-s", "--sequence-length", type=int, default=4608)
    parser.add_argument("-d", "--hidden-dim", type=int, default=9216)
    parser.add_argument("--ranks", default="1,2", help="comma-separated values of p")
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("-it", "--iterations", type=int, default=100)
    parser.add_argument("-wit", "--warmup-iterations", type=int, default=20)
    parser.add_argument("--order", choices=["interleaved", "blocked"], default="interleaved")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    s, h = args.sequence_length, args.hidden_dim
    rows = []
    for precision in args.precisions.split(","):
        dtype = DTYPES[precision]
        for p in (int(x) for x in args.ranks.split(",")):
            x = torch.rand(s, h, device="cuda").to(dtype)
            w1 = (torch.randn(h, h // p, device="cuda") / math.sqrt(h)).to(dtype)
            w2 = (torch.randn(h // p, h, device="cuda") / math.sqrt(h)).to(dtype)
            hidden = torch.empty(s, h // p, device="cuda", dtype=dtype)
            full = torch.empty(s, h, device="cuda", dtype=dtype)
            flops = 2 * s * h * (h // p)
            products = {"matmul1": (x, w1, hidden), "matmul2": (hidden, w2, full)}
            all_times = time_matmuls(products, args.iterations, args.warmup_iterations, args.order)
            for phase, (a, b, _) in products.items():
                times = all_times[phase]
                median = statistics.median(times)
                rows.append(
                    {
                        "ranks": p,
                        "precision": precision,
                        "phase": phase,
                        "order": args.order,
                        "shape": [list(a.shape), list(b.shape)],
                        "median_ms": median,
                        "mean_ms": statistics.fmean(times),
                        "tflops_median": flops / (median * 1e-3) / 1e12,
                    }
                )
                print(f"{precision:9} p={p} {phase}: median {median:.3f} ms, {rows[-1]['tflops_median']:.1f} TFLOP/s", flush=True)
            del x, w1, w2, hidden, full
            torch.cuda.empty_cache()
    payload = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda, "rows": rows}
    with open(args.out, "w") as fh:
        json.dump(payload, fh, indent=1)


if __name__ == "__main__":
    main()
