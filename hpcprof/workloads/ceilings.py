"""`hpcprof bench ceilings`: the attainable GEMM TFLOP/s and collective bus bandwidth of the job's
own devices and ranks, to set a run's figures against (issue 48).

GEMMs: torch.matmul (cuBLAS) per rank, all ranks at once; after the warm-up, each call between CUDA
events (wall clock on CPU), the median of `iters`; TFLOP/s = 2·m·n·k / time. The inputs rotate over
enough pairs to exceed twice the L2 cache (at most MAX_ROTATION), so that no call finds its operands
left in the cache by the previous one.
Collectives: timed as nccl-tests times them (src/common.cu BenchTime): warm-up, barrier, `iters`
calls back to back, synchronize, the elapsed time / iters, averaged over the ranks; on GPUs also
captured in one CUDA graph and replayed (nccl-tests' `-G`), the faster of the two kept (the
`statistic` column says which); algbw =
bytes / time, busbw = algbw x nccl-tests' factor (hpcprof.workloads.ceiling_specs).

Run under any launcher: `mpiexec -n 2 hpcprof bench ceilings --collective all_gather:64M:bfloat16`.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hpcprof.workloads import bootstrap, timing
from hpcprof.workloads.args import DeviceKind
from hpcprof.workloads.ceiling_specs import CollectiveSpec, GemmSpec, bus_factor

SCHEMA = "hpcprof.ceilings/1"
RESULTS_FILE = "ceilings.json"
TORCH_DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}
#: input pairs a GEMM rotates over: at least 2, at most this many
MAX_ROTATION = 64

warnings.filterwarnings("ignore", message=r".*(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated")


def default_out() -> Path:
    """`$HPCPROF_RUN_DIR/ceilings.json` inside a job, else `./ceilings.json`."""
    import os

    run_dir = os.environ.get("HPCPROF_RUN_DIR")
    return Path(run_dir) / RESULTS_FILE if run_dir else Path(RESULTS_FILE)


def rotation(spec: GemmSpec, device: torch.device) -> int:
    """How many input pairs to rotate over: enough to fill twice the L2 cache (2 on CPU)."""
    pair = (spec.m * spec.k + spec.k * spec.n) * TORCH_DTYPES[spec.dtype].itemsize
    if device.type != "cuda":
        return 2
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return max(2, min(MAX_ROTATION, math.ceil(2 * l2 / pair) + 1))


def time_gemm(spec: GemmSpec, ctx: bootstrap.Dist, iters: int, warmup: int) -> float:
    """This rank's median seconds of one `spec` matmul."""
    dtype, dev = TORCH_DTYPES[spec.dtype], ctx.device
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = spec.dtype == "tf32"
    try:
        gen = torch.Generator(device=dev).manual_seed(ctx.rank)
        pairs = [(torch.randn(spec.m, spec.k, generator=gen, device=dev).to(dtype),
                  torch.randn(spec.k, spec.n, generator=gen, device=dev).to(dtype))
                 for _ in range(rotation(spec, dev))]
        out = torch.empty(spec.m, spec.n, dtype=dtype, device=dev)
        for i in range(warmup):
            a, b = pairs[i % len(pairs)]
            torch.matmul(a, b, out=out)
        if ctx.is_cuda:
            torch.cuda.synchronize(dev)
        dist.barrier()
        if ctx.is_cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(iters)]
            for i, (start, end) in enumerate(events):
                a, b = pairs[i % len(pairs)]
                start.record()
                torch.matmul(a, b, out=out)
                end.record()
            torch.cuda.synchronize(dev)
            times = [start.elapsed_time(end) / 1e3 for start, end in events]
        else:
            times = []
            for i in range(iters):
                a, b = pairs[i % len(pairs)]
                t0 = time.perf_counter()
                torch.matmul(a, b, out=out)
                times.append(time.perf_counter() - t0)
        return float(statistics.median(times))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def collective_call(spec: CollectiveSpec, ctx: bootstrap.Dist) -> Any:
    """A no-argument call running `spec` once on pre-allocated buffers."""
    dtype, dev, n = TORCH_DTYPES[spec.dtype], ctx.device, ctx.world_size
    count = spec.nbytes // dtype.itemsize
    if spec.op == "all_gather":
        shard, full = torch.ones(count // n, dtype=dtype, device=dev), torch.empty(count, dtype=dtype, device=dev)
        return lambda: dist.all_gather_into_tensor(full, shard)
    if spec.op == "reduce_scatter":
        full, shard = torch.ones(count, dtype=dtype, device=dev), torch.empty(count // n, dtype=dtype, device=dev)
        return lambda: dist.reduce_scatter_tensor(shard, full)
    buffer = torch.ones(count, dtype=dtype, device=dev)
    return lambda: dist.all_reduce(buffer)


def graphed(call: Any, iters: int, ctx: bootstrap.Dist) -> Any:
    """`iters` calls captured in one CUDA graph, as nccl-tests' `-G` does: its replay runs them back to back
    without the host's per-call launch cost (torch.distributed's is longer than a small collective);
    None on the CPU, or where any rank could not capture (then every rank times the calls eagerly)."""
    if not ctx.is_cuda:
        return None
    graph: Any = torch.cuda.CUDAGraph()
    try:
        stream = torch.cuda.Stream(ctx.device)
        stream.wait_stream(torch.cuda.current_stream(ctx.device))
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(iters):
                call()
        captured = 1
    except RuntimeError:
        graph, captured = None, 0
    agreed = torch.tensor([captured], device=ctx.device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return graph.replay if graph is not None and int(agreed.item()) else None


def timed(run: Any, ctx: bootstrap.Dist) -> float:
    """Seconds of `run()` started on every rank at once (after a barrier), to its last GPU work's end."""
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)
    dist.barrier()
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)
    t0 = time.perf_counter()
    run()
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)
    return time.perf_counter() - t0


def time_collective(spec: CollectiveSpec, ctx: bootstrap.Dist, iters: int, warmup: int) -> tuple[float, str]:
    """This rank's seconds per call and how the calls ran: `iters` calls back to back after a barrier,
    / iters (nccl-tests), launched one by one and, on GPUs, replayed from one CUDA graph (nccl-tests'
    `-G`); the faster of the two, the machine's ceiling (launched one by one, torch.distributed's host cost
    per call starves a small collective; in a graph, NCCL may pick other protocols for a larger one)."""
    call = collective_call(spec, ctx)
    for _ in range(warmup):
        call()

    def one_by_one() -> None:
        for _ in range(iters):
            call()

    best = (timed(one_by_one, ctx) / iters, "calls launched one by one")
    replay = graphed(call, iters, ctx)
    if replay is not None:
        replay()                    # the graph's first replay uploads it
        best = min(best, (timed(replay, ctx) / iters, "one CUDA graph of the calls"))
    return best


def gemm_row(spec: GemmSpec, rank_times: list[float]) -> dict[str, Any]:
    """The result row of a GEMM from each rank's median time: the median over ranks."""
    seconds = float(statistics.median(rank_times))
    return {"kind": "gemm", "op": "matmul", "dtype": spec.dtype, "m": spec.m, "n": spec.n, "k": spec.k,
            "bytes": None, "flops": spec.flops, "time_s": seconds, "statistic": "median over calls, median over ranks",
            "tflops": spec.flops / seconds / 1e12,
            "tflops_min_rank": spec.flops / max(rank_times) / 1e12,
            "tflops_max_rank": spec.flops / min(rank_times) / 1e12,
            "algbw_GBps": None, "busbw_GBps": None, "bus_factor": None}


def collective_row(spec: CollectiveSpec, rank_times: list[float], world_size: int, how: str) -> dict[str, Any]:
    """The result row of a collective from each rank's time per call: their mean (nccl-tests)."""
    seconds = sum(rank_times) / len(rank_times)
    algbw = spec.nbytes / seconds / 1e9
    factor = bus_factor(spec.op, world_size)
    return {"kind": "collective", "op": spec.op, "dtype": spec.dtype, "m": None, "n": None, "k": None,
            "bytes": spec.nbytes, "flops": None, "time_s": seconds,
            "statistic": f"calls back to back ({how}) / calls, mean over ranks (nccl-tests)",
            "tflops": None, "tflops_min_rank": None, "tflops_max_rank": None,
            "algbw_GBps": algbw, "busbw_GBps": algbw * factor, "bus_factor": factor}


def measure(gemms: list[GemmSpec], collectives: list[CollectiveSpec], ctx: bootstrap.Dist,
            iters: int, warmup: int) -> dict[str, Any]:
    """Every measurement on every rank; the result (on every rank)."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info = bootstrap.rank_info(ctx)
    versions = bootstrap.versions(ctx)
    common = {"world_size": ctx.world_size, "iters": iters, "warmup": warmup, "device_name": info["device_name"],
              "backend": ctx.backend, "torch": versions["torch"], "nccl": versions["nccl"], "created": created}
    rows = []
    for gemm in gemms:
        times = bootstrap.gather_objects(time_gemm(gemm, ctx, iters, warmup))
        rows.append({**gemm_row(gemm, times), **common})
    for coll in collectives:
        seconds, how = time_collective(coll, ctx, iters, warmup)
        rows.append({**collective_row(coll, bootstrap.gather_objects(seconds), ctx.world_size, how), **common})
    ranks = bootstrap.gather_objects(info)
    return {"schema": SCHEMA, "workload": "ceilings", "created": created, "world_size": ctx.world_size,
            "device_name": info["device_name"], "versions": versions, "ranks": ranks, "rows": rows}


def summary(result: dict[str, Any]) -> str:
    """Readable rank-0 lines of a result."""
    lines = [f"ceilings: {result['world_size']} ranks, {result['device_name']}, backend {result['versions']['backend']}"]
    for row in result["rows"]:
        if row["kind"] == "gemm":
            lines.append(f"  gemm {row['m']}x{row['n']}x{row['k']} {row['dtype']}: {row['time_s'] * 1e3:.3f} ms, "
                         f"{row['tflops']:.2f} TFLOP/s")
        else:
            lines.append(f"  {row['op']} {row['bytes']} B {row['dtype']}: {row['time_s'] * 1e3:.3f} ms, "
                         f"algbw {row['algbw_GBps']:.2f} GB/s, busbw {row['busbw_GBps']:.2f} GB/s")
    return "\n".join(lines)


def run(gemms: list[GemmSpec], collectives: list[CollectiveSpec], iters: int, warmup: int, out: Path | None,
        device: DeviceKind) -> int:
    """Measure on this rank; rank 0 writes the result and prints the summary."""
    from hpcprof.errors import UserError
    from hpcprof.workloads.ceiling_specs import check_fits

    layout = bootstrap.discover_layout()
    for coll in collectives:
        try:
            check_fits(coll, layout.world_size)
        except ValueError as exc:
            raise UserError(f"--collective {coll.text()}: {exc}") from None
    ctx = bootstrap.init_distributed(layout, "auto", device)
    with bootstrap.abort_on_error(ctx):
        result = measure(gemms, collectives, ctx, iters, warmup)
    bootstrap.shutdown(ctx)
    if ctx.rank == 0:
        path = timing.write_json(out or default_out(), result)
        print(summary(result), flush=True)
        print(f"  results: {path}", flush=True)
    return 0
