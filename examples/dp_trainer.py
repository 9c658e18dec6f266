"""A data-parallel trainer to profile as a `command` workload: a stack of MLP blocks trained on random
data, its gradients averaged across ranks by DDP (all-reduce) or sharded by FSDP2
(`torch.distributed.fsdp.fully_shard`: parameters all-gathered before each block's forward and
backward, gradients reduce-scattered after it, the next block's all-gather prefetched).

Runs under hpcprof's rank wrapper on any launcher (mpiexec, srun, torchrun) through
hpcprof.workloads.bootstrap; NCCL on GPU, gloo on CPU. One optimizer step per iteration, so the
step hook marks every iteration (`hpcprof:step`, steps/rank{R}.jsonl, torch.profiler's steps).

`--late-rank R --late-ms M` plants a straggler: rank R sleeps M ms on its host before each step's
forward (the others then wait for it in the step's first collective). `--batch` is per rank
(`--global-batch` fixes the global batch instead: each rank takes its share), so a sweep over
world size is weak scaling by default, strong with --global-batch. Rank 0 prints the median step
time at the end.

    mpiexec -n 2 python examples/dp_trainer.py --strategy fsdp --steps 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from hpcprof.workloads.bootstrap import Dist, discover_layout, init_distributed, shutdown


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dim", type=int, default=256, help="width of each block")
    p.add_argument("--layers", type=int, default=4, help="MLP blocks (FSDP2: one shard unit each)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--batch", type=int, default=64, help="samples per rank and step (weak scaling)")
    size.add_argument("--global-batch", type=int, default=None, help="samples per step over all ranks (strong)")
    p.add_argument("--late-rank", type=int, default=-1, help="the rank that sleeps before each step")
    p.add_argument("--late-ms", type=float, default=0.0, help="how long it sleeps (ms)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return p.parse_args(argv)


def model(dim: int, layers: int) -> nn.Sequential:
    """`layers` residual-free MLP blocks (Linear, GELU, Linear) and a head."""
    blocks = [nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(layers)]
    return nn.Sequential(*blocks, nn.Linear(dim, 1))


def wrapped(net: nn.Sequential, strategy: str, device: torch.device) -> nn.Module:
    """`net` on `device`, under DDP or FSDP2 (each block its own unit, then the root)."""
    net = net.to(device)
    if strategy == "ddp":
        return nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for block in net[:-1]:
        fully_shard(block)
    fully_shard(net)
    return net


def train(args: argparse.Namespace, ctx: Dist) -> None:
    """The training loop; rank 0 prints the median step. Its model is freed when it returns."""
    torch.manual_seed(1234)
    net = wrapped(model(args.dim, args.layers), args.strategy, ctx.device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    per_rank = args.batch if args.global_batch is None else max(1, args.global_batch // ctx.world_size)
    gen = torch.Generator(device="cpu").manual_seed(ctx.rank)
    x = torch.randn(per_rank, args.dim, generator=gen).to(ctx.device)
    y = torch.randn(per_rank, 1, generator=gen).to(ctx.device)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        if ctx.rank == args.late_rank and args.late_ms > 0:
            time.sleep(args.late_ms / 1000)
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        times.append(time.perf_counter() - start)
    dist.barrier()
    if ctx.rank == 0:
        print(f"{args.strategy} world={ctx.world_size} batch/rank={per_rank} "
              f"median step {1e3 * statistics.median(times[1:] or times):.2f} ms", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    ctx = init_distributed(discover_layout(), device_kind=args.device)
    try:
        train(args, ctx)
    finally:
        shutdown(ctx)     # after the model is out of scope (its docstring says why)


if __name__ == "__main__":
    main()
