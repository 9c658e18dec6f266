"""`hpcprof bench ceilings`: the attainable GEMM TFLOP/s and collective bus bandwidth of the job's
own devices and ranks, to set a run's figures against.

GEMMs: torch.matmul (cuBLAS) per rank, all ranks at once; after the warm-up, each call between CUDA
events (wall clock on CPU), the median of `iters`; TFLOP/s = 2·m·n·k / time. The inputs rotate over
enough pairs to exceed twice the L2 cache (at most MAX_ROTATION), so that no call finds its operands
left in the cache by the previous one.
Collectives: timed as nccl-tests times them (src/common.cu BenchTime): warm-up, barrier, `iters`
calls back to back, synchronize, the elapsed time / iters, averaged over the ranks, the best of TRIALS
such runs; each way they can run: through torch.distributed and, on GPUs, through NCCL's own API on
buffers from NCCL's allocator (hpcprof.workloads.nccl_api, as nccl-tests calls it), also registered as
symmetric windows where NCCL has them (2.27+, nccl-tests' `-R 2`), each launched one by one and
captured in one CUDA graph and replayed (nccl-tests' `-G`); the fastest kept (the `statistic` column
says which; ceilings.json's `ways` has them all); algbw = bytes / time, busbw = algbw x nccl-tests'
factor (hpcprof.workloads.ceiling_specs).

Run under any launcher: `mpiexec -n 2 hpcprof bench ceilings --collective all_gather:64M:bfloat16`.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from hpcprof.workloads import bootstrap, timing
from hpcprof.workloads.args import DeviceKind
from hpcprof.workloads.ceiling_specs import CollectiveSpec, GemmSpec, bus_factor
from hpcprof.workloads.ranks import RankLayout

if TYPE_CHECKING:
    from hpcprof.workloads.nccl_api import Communicator

SCHEMA = "hpcprof.ceilings/1"
RESULTS_FILE = "ceilings.json"
TORCH_DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}
#: input pairs a GEMM rotates over: at least 2, at most this many
MAX_ROTATION = 64
#: timed runs of `iters` back-to-back collective calls per way; the fastest is kept (nccl-tests' `-N` cycles:
#: fifty 1 MiB calls take ~0.5 ms, which one host hiccup stretches by a fifth)
TRIALS = 5
#: launches of a graph of `iters` calls per timed run (nccl-tests' `-G 10` in benchmarks/gpu/ceilings.sh): the
#: launch and the wait for the last call, ~20-40 us, weigh a tenth (fifty 1 MiB calls take ~0.5 ms)
GRAPH_LAUNCHES = 10

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


def counts(spec: CollectiveSpec, world_size: int) -> tuple[int, int]:
    """Elements of the send and the receive buffer: all-gather and reduce-scatter out of place (a rank's
    part and the whole), all-reduce in place (the buffer, twice)."""
    count = spec.nbytes // TORCH_DTYPES[spec.dtype].itemsize
    return {"all_gather": (count // world_size, count), "reduce_scatter": (count, count // world_size)}.get(
        spec.op, (count, count))


def collective_call(spec: CollectiveSpec, ctx: bootstrap.Dist) -> Any:
    """A no-argument call running `spec` once through torch.distributed on pre-allocated buffers."""
    dtype, dev = TORCH_DTYPES[spec.dtype], ctx.device
    send_count, recv_count = counts(spec, ctx.world_size)
    send = torch.ones(send_count, dtype=dtype, device=dev)
    if spec.op == "all_reduce":
        return lambda: dist.all_reduce(send)
    recv = torch.empty(recv_count, dtype=dtype, device=dev)
    if spec.op == "all_gather":
        return lambda: dist.all_gather_into_tensor(recv, send)
    return lambda: dist.reduce_scatter_tensor(recv, send)


def nccl_communicator(ctx: bootstrap.Dist) -> tuple[Communicator, Path] | None:
    """A communicator of NCCL's own API over the job's ranks, on the libnccl torch's NCCL backend loaded,
    and the libcudart to capture its calls with; None on the CPU or where any rank cannot make one (then
    the collectives run through torch.distributed only)."""
    from hpcprof.workloads.nccl_api import Communicator, NcclError, loaded_library

    libraries = (loaded_library(), loaded_library("libcudart.so")) if ctx.is_cuda and ctx.backend == "nccl" else None
    nccl, runtime = libraries if libraries is not None else (None, None)
    if not bootstrap.every_rank(nccl is not None and runtime is not None) or nccl is None or runtime is None:
        return None
    unique_id = bootstrap.gather_objects(Communicator.unique_id(nccl) if ctx.rank == 0 else b"")[0]
    try:
        comm: Communicator | None = Communicator(nccl, ctx.rank, ctx.world_size, unique_id)
    except (OSError, AttributeError, NcclError):
        comm = None
    return (comm, runtime) if bootstrap.every_rank(comm is not None) and comm is not None else None


def time_nccl(spec: CollectiveSpec, ctx: bootstrap.Dist, iters: int, warmup: int,
              nccl: tuple[Communicator, Path]) -> dict[str, list[float]]:
    """This rank's seconds per call through NCCL's own API as nccl-tests makes them (buffers from
    ncclMemAlloc, all-gather and reduce-scatter out of place, all-reduce in place, on a stream of their
    own; where NCCL has them, also with the buffers registered as symmetric windows, nccl-tests' `-R 2`):
    launched one by one, and replayed from one CUDA graph where every rank could capture them."""
    comm, _ = nccl
    size = TORCH_DTYPES[spec.dtype].itemsize
    send_count, recv_count = counts(spec, ctx.world_size)
    buffers = {comm.alloc(send_count * size): send_count * size}
    send = next(iter(buffers))
    recv = send if spec.op == "all_reduce" else comm.alloc(recv_count * size)
    buffers[recv] = recv_count * size
    call = comm.call(spec.op, send, recv, min(send_count, recv_count), spec.dtype)
    try:
        seconds = time_nccl_calls(call, "NCCL's API", ctx, iters, warmup, nccl)
        windows = register_windows(comm, buffers) if comm.has_windows else None
        if bootstrap.every_rank(windows is not None) and windows is not None:
            try:
                seconds.update(time_nccl_calls(call, "NCCL's API, symmetric windows", ctx, iters, warmup, nccl))
            finally:
                torch.cuda.synchronize(ctx.device)
                for window in windows:
                    comm.deregister_window(window)
    finally:
        torch.cuda.synchronize(ctx.device)
        for pointer in buffers:
            comm.free(pointer)
    return seconds


def register_windows(comm: Communicator, buffers: dict[int, int]) -> list[int] | None:
    """The buffers (pointer: bytes) registered as symmetric windows; None where NCCL refused (a platform
    without the memory features they need: the way is then left out on every rank)."""
    from hpcprof.workloads.nccl_api import NcclError

    try:
        return [comm.register_window(pointer, nbytes) for pointer, nbytes in buffers.items()]
    except NcclError:
        return None


def time_nccl_calls(call: Any, name: str, ctx: bootstrap.Dist, iters: int, warmup: int,
                    nccl: tuple[Communicator, Path]) -> dict[str, list[float]]:
    """Seconds per call of NCCL's `call` on a stream of its own (way_times), its graph captured with the
    CUDA runtime's own stream capture."""
    from hpcprof.workloads.nccl_api import CapturedGraph, NcclError

    stream = torch.cuda.Stream(ctx.device).cuda_stream
    graphs: list[CapturedGraph] = []

    def replay() -> Any:
        try:
            graphs.append(CapturedGraph(nccl[1], call, iters, stream))
        except NcclError:
            pass
        return (lambda: graphs[0].launch(stream)) if bootstrap.every_rank(bool(graphs)) and graphs else None

    try:
        return way_times(name, lambda: call(stream), replay, ctx, iters, warmup)
    finally:
        torch.cuda.synchronize(ctx.device)
        for graph in graphs:
            graph.close()


def way_times(name: str, call: Any, replay: Any, ctx: bootstrap.Dist, iters: int, warmup: int) -> dict[str, list[float]]:
    """This rank's seconds per call of `call` in each run: `iters` calls back to back after a barrier,
    / iters (nccl-tests), launched one by one and, where `replay()` gives a graph's replay of them (None
    where some rank could not capture), replayed GRAPH_LAUNCHES times from that CUDA graph (nccl-tests' `-G`)."""
    for _ in range(warmup):
        call()

    def one_by_one() -> None:
        for _ in range(iters):
            call()

    seconds = {f"{name}, calls launched one by one": per_call(timed(one_by_one, ctx), iters)}
    run = replay()
    if run is not None:
        run()                       # the graph's first replay uploads it

        def replays() -> None:
            for _ in range(GRAPH_LAUNCHES):
                run()

        seconds[f"{name}, one CUDA graph of the calls"] = per_call(timed(replays, ctx), iters * GRAPH_LAUNCHES)
    return seconds


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
    except RuntimeError:
        graph = None
    return graph.replay if bootstrap.every_rank(graph is not None) and graph is not None else None


def timed(run: Any, ctx: bootstrap.Dist) -> list[float]:
    """Seconds of each of TRIALS runs of `run()`, each started on every rank at once (after a barrier) and
    timed to its last GPU work's end."""
    seconds = []
    for _ in range(TRIALS):
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        dist.barrier()
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        t0 = time.perf_counter()
        run()
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        seconds.append(time.perf_counter() - t0)
    return seconds


def per_call(seconds: list[float], iters: int) -> list[float]:
    """Each run's seconds per call."""
    return [s / iters for s in seconds]


def time_collective(spec: CollectiveSpec, ctx: bootstrap.Dist, iters: int, warmup: int) -> dict[str, list[float]]:
    """This rank's seconds per call through torch.distributed (way_times), on GPUs also from a graph
    captured with torch.cuda.graph."""
    call = collective_call(spec, ctx)
    return way_times("torch.distributed", call, lambda: graphed(call, iters, ctx), ctx, iters, warmup)


def gemm_row(spec: GemmSpec, rank_times: list[float]) -> dict[str, Any]:
    """The result row of a GEMM from each rank's median time: the median over ranks."""
    seconds = float(statistics.median(rank_times))
    return {"kind": "gemm", "op": "matmul", "dtype": spec.dtype, "m": spec.m, "n": spec.n, "k": spec.k,
            "bytes": None, "flops": spec.flops, "time_s": seconds, "statistic": "median over calls, median over ranks",
            "tflops": spec.flops / seconds / 1e12,
            "tflops_min_rank": spec.flops / max(rank_times) / 1e12,
            "tflops_max_rank": spec.flops / min(rank_times) / 1e12,
            "algbw_GBps": None, "busbw_GBps": None, "bus_factor": None}


def collective_row(spec: CollectiveSpec, rank_ways: list[dict[str, list[float]]], world_size: int) -> dict[str, Any]:
    """The result row of a collective from each rank's time per call of each way and trial: per way and
    trial their mean over ranks (nccl-tests), per way its fastest trial, the fastest way's kept; `ways`:
    every way's busbw (GB/s)."""
    factor = bus_factor(spec.op, world_size)
    means = {way: min(sum(trials) / len(trials) for trials in zip(*(times[way] for times in rank_ways), strict=True))
             for way in rank_ways[0]}
    how, seconds = min(means.items(), key=lambda item: item[1])
    algbw = spec.nbytes / seconds / 1e9
    return {"kind": "collective", "op": spec.op, "dtype": spec.dtype, "m": None, "n": None, "k": None,
            "ways": {way: spec.nbytes / mean / 1e9 * factor for way, mean in means.items()},
            "bytes": spec.nbytes, "flops": None, "time_s": seconds,
            "statistic": f"calls back to back ({how}) / calls, mean over ranks (nccl-tests), best of {TRIALS} runs",
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
    nccl = nccl_communicator(ctx) if collectives else None
    for coll in collectives:
        seconds = time_collective(coll, ctx, iters, warmup)
        if nccl is not None:
            seconds.update(time_nccl(coll, ctx, iters, warmup, nccl))
        rows.append({**collective_row(coll, bootstrap.gather_objects(seconds), ctx.world_size), **common})
    if nccl is not None:
        nccl[0].close()
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


def short_alloc_error(exc: BaseException) -> str:
    """PyTorch's allocation failure without its C++ source position: `tried to allocate 4000000000000 bytes`."""
    import re

    found = re.search(r"tried to allocate [\d.,]+ ?[KMGT]?i?B(?:ytes)?|[Tt]ried to allocate [^(.]*", str(exc))
    return found[0].strip() if found else type(exc).__name__


def run(gemms: list[GemmSpec], collectives: list[CollectiveSpec], iters: int, warmup: int, out: Path | None,
        device: DeviceKind, layout: RankLayout) -> int:
    """Measure on this rank of `layout` (the collectives checked against it: ceiling_specs.check_all_fit);
    rank 0 writes the result and prints the summary."""
    from hpcprof.core.errors import UserError

    ctx = bootstrap.init_distributed(layout, "auto", device)
    with bootstrap.abort_on_error(ctx):
        try:
            result = measure(gemms, collectives, ctx, iters, warmup)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not isinstance(exc, (torch.OutOfMemoryError, MemoryError)) and "allocate" not in str(exc):
                raise
            raise UserError(f"the sizes asked for do not fit in this {ctx.device.type.upper()}'s memory "
                            f"({short_alloc_error(exc)}); give smaller --gemm or --collective sizes") from None
    bootstrap.shutdown(ctx)
    if ctx.rank == 0:
        path = timing.write_json(out or default_out(), result)
        print(summary(result), flush=True)
        print(f"  results: {path}", flush=True)
    return 0
