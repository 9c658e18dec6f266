"""Standalone all-gather / reduce-scatter loop of seqpar's buffer sizes (NCCL), for comparison.

Run one process per GPU under torchrun or mpiexec. Each collective is timed two ways: one CUDA event
pair per call (as seqpar does), and nccl-tests style (events around `iterations` back-to-back calls).
Bytes and bus bandwidth follow nccl-tests: size = S*H*elem, busbw = size/time * (p-1)/p.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.distributed as dist

from hpcprof.workloads import bootstrap

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def time_each(op, iterations: int) -> list[float]:
    pairs = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def time_batch(op, iterations: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        op()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-s", "--sequence-length", type=int, default=4608)
    parser.add_argument("-d", "--hidden-dim", type=int, default=9216)
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("-it", "--iterations", type=int, default=100)
    parser.add_argument("-wit", "--warmup-iterations", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ctx = bootstrap.init_distributed(bootstrap.discover_layout())
    p, s, h = ctx.world_size, args.sequence_length, args.hidden_dim
    rows = []
    for precision in args.precisions.split(","):
        dtype = DTYPES[precision]
        small = torch.rand(s // p, h, device=ctx.device).to(dtype)
        big = torch.rand(s, h, device=ctx.device).to(dtype)
        size = s * h * dtype.itemsize
        ops = {
            "allgather": lambda big=big, small=small: dist.all_gather_into_tensor(big, small),
            "reduce_scatter": lambda big=big, small=small: dist.reduce_scatter_tensor(small, big),
        }
        for phase, op in ops.items():
            for _ in range(args.warmup_iterations):
                op()
            each = time_each(op, args.iterations)
            batch_ms = time_batch(op, args.iterations)
            per_rank = bootstrap.gather_objects((statistics.median(each), statistics.fmean(each), batch_ms))
            median = statistics.fmean(x[0] for x in per_rank)
            mean = statistics.fmean(x[1] for x in per_rank)
            batch = statistics.fmean(x[2] for x in per_rank)
            factor = (p - 1) / p
            rows.append(
                {
                    "ranks": p,
                    "precision": precision,
                    "phase": phase,
                    "bytes": size,
                    "median_ms": median,
                    "mean_ms": mean,
                    "batched_ms": batch,
                    "busbw_GBps_median": size / (median * 1e-3) / 1e9 * factor,
                    "busbw_GBps_batched": size / (batch * 1e-3) / 1e9 * factor,
                }
            )
            if ctx.rank == 0:
                r = rows[-1]
                print(
                    f"{precision:9} p={p} {phase:15} {size / 1e6:.1f} MB: median {median:.3f} ms "
                    f"busbw {r['busbw_GBps_median']:.1f} GB/s; batched {batch:.3f} ms busbw {r['busbw_GBps_batched']:.1f} GB/s",
                    flush=True,
                )
    infos = bootstrap.gather_objects(bootstrap.rank_info(ctx))
    if ctx.rank == 0:
        with open(args.out, "w") as fh:
            json.dump({"versions": bootstrap.versions(ctx), "ranks": infos, "rows": rows}, fh, indent=1)
    bootstrap.shutdown(ctx)


if __name__ == "__main__":
    main()
