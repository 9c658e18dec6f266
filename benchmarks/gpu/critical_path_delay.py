"""A seqpar-shaped loop with a known straggler, for checking `hpcprof nsys|trace critical-path` on GPUs.

Every iteration is all-gather -> matmul1 -> matmul2 -> reduce-scatter under NVTX / record_function
ranges (`timed` > `iteration` > phase, as seqpar names them). In the iterations of --delay-at, rank 1
runs --extra-matmuls more matmuls inside `matmul2`, timed with a CUDA event pair: that time is what the
other ranks should wait in the reduce-scatter. Under HPCPROF_PROFILE_TOOL=torch the timed loop is
profiled (ProfilerStep#i = iteration i). Rank 1 writes {iteration: extra_ns} to --out.

    bash benchmarks/gpu/launch.sh 2 python3 benchmarks/gpu/critical_path_delay.py --out delays.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch
import torch.distributed as dist

from hpcprof.workloads import bootstrap
from hpcprof.workloads.timing import nvtx_range, trace_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-s", "--sequence-length", type=int, default=4608)
    parser.add_argument("-d", "--hidden-dim", type=int, default=9216)
    parser.add_argument("-it", "--iterations", type=int, default=16)
    parser.add_argument("-wit", "--warmup-iterations", type=int, default=4)
    parser.add_argument("--delay-at", default="5,11", help="timed iterations where rank 1 is slow")
    parser.add_argument("--extra-matmuls", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ctx = bootstrap.init_distributed(bootstrap.discover_layout())
    p, s, h = ctx.world_size, args.sequence_length, args.hidden_dim
    delay_at = {int(i) for i in args.delay_at.split(",") if i}
    x = torch.rand(s // p, h, device=ctx.device, dtype=torch.bfloat16)
    gathered = torch.empty(s, h, device=ctx.device, dtype=torch.bfloat16)
    w1 = torch.rand(h, h // p, device=ctx.device, dtype=torch.bfloat16)
    w2 = torch.rand(h // p, h, device=ctx.device, dtype=torch.bfloat16)
    hidden = torch.empty(s, h // p, device=ctx.device, dtype=torch.bfloat16)
    full = torch.empty(s, h, device=ctx.device, dtype=torch.bfloat16)
    out = torch.empty(s // p, h, device=ctx.device, dtype=torch.bfloat16)
    extra: dict[int, tuple[torch.cuda.Event, torch.cuda.Event]] = {}

    def phase(name: str) -> contextlib.AbstractContextManager[None]:
        stack = contextlib.ExitStack()
        stack.enter_context(nvtx_range(name))
        stack.enter_context(torch.profiler.record_function(name))
        return stack

    def iteration(i: int) -> None:
        with phase("iteration"):
            with phase("allgather"):
                dist.all_gather_into_tensor(gathered, x)
            with phase("matmul1"):
                torch.matmul(gathered, w1, out=hidden)
            with phase("matmul2"):
                torch.matmul(hidden, w2, out=full)
                if ctx.rank == 1 and i in delay_at:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(args.extra_matmuls):
                        torch.matmul(hidden, w2, out=full)
                    end.record()
                    extra[i] = (start, end)
            with phase("reduce_scatter"):
                dist.reduce_scatter_tensor(out, full)

    with nvtx_range("warmup"):
        for _ in range(args.warmup_iterations):
            iteration(-1)
    torch.cuda.synchronize()
    dist.barrier()
    torch_tool = os.environ.get("HPCPROF_PROFILE_TOOL") == "torch"
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                              torch.profiler.ProfilerActivity.CUDA]) if torch_tool else None
    if prof is not None:
        prof.start()
    with nvtx_range("timed"):
        for i in range(args.iterations):
            iteration(i)
            if prof is not None:
                prof.step()
    torch.cuda.synchronize()
    if prof is not None:
        prof.stop()
        trace_dir().mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_dir() / f"rank{ctx.rank}.pt.trace.json.gz"))
    if ctx.rank == 1:
        with open(args.out, "w") as fh:
            json.dump({i: round(a.elapsed_time(b) * 1e6) for i, (a, b) in extra.items()}, fh)
    dist.barrier()
    bootstrap.shutdown(ctx)


if __name__ == "__main__":
    main()
