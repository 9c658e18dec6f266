"""The sequence-parallel benchmark's torch part: buffers, the timed loop, the check and the results.

`hpcprof.workloads.seqpar` (the ranks' `python -m` entry) checks the arguments against the job's
ranks without torch, then calls `run` here.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist

from hpcprof.core.errors import UserError
from hpcprof.core.models import dump
from hpcprof.workloads import bootstrap, timing
from hpcprof.workloads.args import SeqparArgs, resolve_torch_schedule, torch_profile_tool_requested
from hpcprof.workloads.ranks import RankLayout

PHASES = ["allgather", "matmul1", "matmul2", "reduce_scatter", "iteration"]
COLLECTIVES = ("allgather", "reduce_scatter")
MATMULS = ("matmul1", "matmul2")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# ||out - ref|| / ||ref|| accepted by --check, per precision (float32 without TF32).
CHECK_TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}
RESULTS_FILE = "seqpar.json"
SCHEMA = "hpcprof.seqpar/1"
warnings.filterwarnings("ignore", message=r".*(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated")


def buffer_bytes(args: SeqparArgs, world_size: int) -> int:
    """Bytes one rank allocates for its Buffers (plus the float32 tensor each shard is drawn in)."""
    p, s, h = world_size, args.sequence_length, args.hidden_dim
    item = DTYPES[args.precision].itemsize
    return item * (2 * s * h + 2 * (s // p) * h + s * (h // p) + 2 * h * (h // p)) + 4 * max(s // p * h, h * (h // p))


def check_memory(args: SeqparArgs, ctx: bootstrap.Dist) -> None:
    """Refuse sizes whose buffers do not fit in the device's free memory (all ranks of a CPU
    run share this host's), before anything is allocated."""
    need = buffer_bytes(args, ctx.world_size)
    if ctx.device.type == "cuda":
        free, sharers = torch.cuda.mem_get_info(ctx.device)[0], 1
    else:
        meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo"))
        free, sharers = int(meminfo["MemAvailable"].split()[0]) * 1024, ctx.world_size
    if need * sharers > free:
        raise UserError(f"seqpar: sequence_length {args.sequence_length} x hidden_dim {args.hidden_dim} "
                        f"needs {need * sharers / 2**30:.1f} GiB of {ctx.device.type} memory, "
                        f"{free / 2**30:.1f} GiB free; use smaller -s/-d")


class Buffers:
    """The rank's shards and work buffers."""

    def __init__(self, args: SeqparArgs, ctx: bootstrap.Dist) -> None:
        p, s, h = ctx.world_size, args.sequence_length, args.hidden_dim
        dtype, dev = DTYPES[args.precision], ctx.device
        gen = torch.Generator(device=dev).manual_seed(args.seed + ctx.rank)
        # x ~ U(0,1), W ~ N(0, 1/H): every stage holds O(1) values. The reduce-scatter writes `output`, not
        # `input`, so each iteration works on the same data (the original fed it back, with 1e-10 scales
        # that drove the values towards zero).
        self.input = torch.rand(s // p, h, generator=gen, device=dev).to(dtype)
        self.w1 = (torch.randn(h, h // p, generator=gen, device=dev) / math.sqrt(h)).to(dtype)
        self.w2 = (torch.randn(h // p, h, generator=gen, device=dev) / math.sqrt(h)).to(dtype)
        self.gathered = torch.empty(s, h, dtype=dtype, device=dev)
        self.hidden = torch.empty(s, h // p, dtype=dtype, device=dev)
        self.full = torch.empty(s, h, dtype=dtype, device=dev)
        self.output = torch.empty(s // p, h, dtype=dtype, device=dev)


def one_iteration(buf: Buffers, timer: timing.PhaseTimer, iteration: int, capture: str) -> None:
    """AG -> MM1 -> MM2 -> RS, each phase timed; `capture` wraps that phase in cudaProfilerStart/Stop."""
    with timing.profiler_range(capture == "iteration"), timer.phase(iteration, "iteration"):
        with timing.profiler_range(capture == "allgather"), timer.phase(iteration, "allgather"):
            dist.all_gather_into_tensor(buf.gathered, buf.input)
        with timing.profiler_range(capture == "matmul1"), timer.phase(iteration, "matmul1"):
            torch.matmul(buf.gathered, buf.w1, out=buf.hidden)
        with timing.profiler_range(capture == "matmul2"), timer.phase(iteration, "matmul2"):
            torch.matmul(buf.hidden, buf.w2, out=buf.full)
        with timing.profiler_range(capture == "reduce_scatter"), timer.phase(iteration, "reduce_scatter"):
            dist.reduce_scatter_tensor(buf.output, buf.full)


def reference_check(args: SeqparArgs, buf: Buffers, ctx: bootstrap.Dist) -> dict[str, Any]:
    """Run one iteration and compare this rank's output with a float64 reference.

    The reference is X[rows of this rank] @ W1_full @ W2_full, with W1_full = [W1_0 | ... | W1_p-1]
    and W2_full = [W2_0; ...; W2_p-1] gathered from all ranks.
    """
    p, s, h = ctx.world_size, args.sequence_length, args.hidden_dim
    one_iteration(buf, timing.PhaseTimer(ctx.device), -1, "none")
    rows = slice(ctx.rank * (s // p), (ctx.rank + 1) * (s // p))
    allgather_exact = bool(torch.equal(buf.gathered[rows], buf.input))
    w1_t = torch.empty(h, h, dtype=buf.w1.dtype, device=ctx.device)
    dist.all_gather_into_tensor(w1_t, buf.w1.t().contiguous())
    w2_full = torch.empty(h, h, dtype=buf.w2.dtype, device=ctx.device)
    dist.all_gather_into_tensor(w2_full, buf.w2.contiguous())
    ref = buf.gathered[rows].double() @ w1_t.double().t() @ w2_full.double()
    out = buf.output.double()
    rel_error = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
    finite = bool(torch.isfinite(out).all())
    tolerance = CHECK_TOLERANCE[args.precision]
    return {
        "rank": ctx.rank,
        "rel_error": rel_error,
        "tolerance": tolerance,
        "allgather_exact": allgather_exact,
        "finite": finite,
        "passed": finite and allgather_exact and rel_error <= tolerance,
    }


def derived_rates(stats: list[dict[str, Any]], args: SeqparArgs, world_size: int) -> list[dict[str, Any]]:
    """Add bytes, algbw/busbw (nccl-tests convention) and matmul TFLOP/s to the phase stats rows."""
    p, s, h = world_size, args.sequence_length, args.hidden_dim
    elem = DTYPES[args.precision].itemsize
    coll_bytes = s * h * elem  # all-gather output = reduce-scatter input = S*H elements
    matmul_flops = 2 * s * h * (h // p)
    for row in stats:
        row.update({"bytes": None, "algbw_GBps": None, "busbw_GBps": None, "busbw_GBps_median": None})
        row.update({"flops": None, "tflops": None, "tflops_median": None})
        if row["phase"] in COLLECTIVES:
            factor = (p - 1) / p
            algbw = coll_bytes / (row["mean_ms"] * 1e-3) / 1e9
            algbw_median = coll_bytes / (row["median_ms"] * 1e-3) / 1e9
            row.update(
                bytes=coll_bytes,
                algbw_GBps=algbw,
                busbw_GBps=algbw * factor,
                busbw_GBps_median=algbw_median * factor,
            )
        elif row["phase"] in MATMULS:
            row.update(
                flops=matmul_flops,
                tflops=matmul_flops / (row["mean_ms"] * 1e-3) / 1e12,
                tflops_median=matmul_flops / (row["median_ms"] * 1e-3) / 1e12,
            )
    return stats


def benchmark(args: SeqparArgs, ctx: bootstrap.Dist) -> dict[str, Any]:
    """Warm up, run the timed loop (with the requested profiler hooks), gather results on every rank."""
    buf = Buffers(args, ctx)
    window = args.profile_range()
    use_torch_profiler = torch_profile_tool_requested(args.torch_profiler)
    schedule = resolve_torch_schedule(args.torch_schedule)

    # started before the warm-up, which its start-up's cost lands in, not the first timed iteration;
    # it records nothing there (its schedule steps in the timed loop only)
    prof = timing.make_torch_profiler(ctx.rank, schedule, timing.torch_gzip_requested(args.torch_gzip)) if use_torch_profiler else None
    if prof is not None:
        prof.start()
    with timing.nvtx_range("warmup"):
        warm = timing.PhaseTimer(ctx.device)
        for i in range(args.warmup_iterations):
            one_iteration(buf, warm, i, "none")
        warm.finish()

    timer = timing.PhaseTimer(ctx.device)
    # without a narrower window, the profiler API's window is the timed loop: an nsys/ncu capture
    # range (cudaProfilerApi) then holds the timed iterations only, not start-up and warm-up. It
    # opens before the barrier, so every rank is being captured before any starts the loop.
    whole_loop = window is None and args.capture == "none"
    if whole_loop:
        timing.profiler_start()
    if ctx.is_cuda:
        torch.cuda.synchronize()
    dist.barrier()
    loop_start = time.perf_counter()
    with timing.nvtx_range("timed"):
        for i in range(args.iterations):
            in_window = window is None or i in window
            if window is not None and args.capture == "none" and i == window.start:
                timing.profiler_start()
            one_iteration(buf, timer, i, args.capture if in_window else "none")
            if window is not None and args.capture == "none" and i == window.stop - 1:
                timing.profiler_stop()
            if prof is not None:
                prof.step()
    if whole_loop:
        timing.profiler_stop()
    if prof is not None:
        prof.stop()
    if ctx.is_cuda:
        torch.cuda.synchronize()
    loop_wall_s = time.perf_counter() - loop_start

    # the iterations torch.profiler worked in are not the program's: left out of its figures, as ddp's
    # window steps; those it recorded in, against those it did not touch, give its slowdown
    touched, recorded = timing.profiler_iterations(schedule, args.iterations) if prof is not None else (set(), set())
    if len(touched) == args.iterations:     # the profiler in every iteration: none to leave out, no baseline
        touched, recorded = set(), set()
    rows = [{"rank": ctx.rank, **row, "counted": True, "window": row["iteration"] in touched,
             "profiled": row["iteration"] in recorded} for row in timer.finish()]
    check = reference_check(args, buf, ctx) if args.check else None
    gathered = bootstrap.gather_objects(
        {"rows": rows, "info": bootstrap.rank_info(ctx), "check": check, "loop_wall_s": loop_wall_s}
    )
    all_rows = [row for part in gathered for row in part["rows"]]
    config = dump(args) | {
        "world_size": ctx.world_size,
        "element_bytes": DTYPES[args.precision].itemsize,
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "shapes": {
            "input": [args.sequence_length // ctx.world_size, args.hidden_dim],
            "gathered": [args.sequence_length, args.hidden_dim],
            "w1": [args.hidden_dim, args.hidden_dim // ctx.world_size],
            "w2": [args.hidden_dim // ctx.world_size, args.hidden_dim],
        },
    }
    return {
        "schema": SCHEMA,
        "workload": "seqpar",
        "config": config,
        "versions": bootstrap.versions(ctx),
        "ranks": [part["info"] for part in gathered],
        "phases": derived_rates(timing.phase_stats([r for r in all_rows if not r["window"]], PHASES), args,
                                ctx.world_size),
        "iterations": all_rows,
        "loop": [{"rank": part["info"]["rank"], "wall_s": part["loop_wall_s"]} for part in gathered],
        "check": [part["check"] for part in gathered] if args.check else None,
    }


def summary(result: dict[str, Any]) -> str:
    """Readable rank-0 summary of a result."""
    cfg = result["config"]
    lines = [
        f"seqpar: {cfg['world_size']} ranks, S={cfg['sequence_length']} H={cfg['hidden_dim']} "
        f"{cfg['precision']}, {cfg['iterations']} timed + {cfg['warmup_iterations']} warm-up iterations, "
        f"backend {result['versions']['backend']}, {result['ranks'][0]['device_name']}",
        f"  shapes: input {cfg['shapes']['input']}, gathered {cfg['shapes']['gathered']}, "
        f"W1 {cfg['shapes']['w1']}, W2 {cfg['shapes']['w2']}",
        f"  {'phase':<15}{'mean ms':>10}{'min-rank':>10}{'max-rank':>10}{'median':>10}  rate",
    ]
    for row in result["phases"]:
        if row["busbw_GBps"] is not None:
            rate = f"{row['bytes'] / 1e6:.1f} MB, algbw {row['algbw_GBps']:.2f} GB/s, busbw {row['busbw_GBps']:.2f} GB/s"
        elif row["tflops"] is not None:
            rate = f"{row['tflops']:.2f} TFLOP/s"
        else:
            rate = ""
        lines.append(
            f"  {row['phase']:<15}{row['mean_ms']:>10.3f}{row['min_rank_mean_ms']:>10.3f}"
            f"{row['max_rank_mean_ms']:>10.3f}{row['median_ms']:>10.3f}  {rate}"
        )
    if result["check"]:
        worst = max(c["rel_error"] for c in result["check"])
        ok = all(c["passed"] for c in result["check"])
        lines.append(f"  check vs float64: max rel error {worst:.3e} ({'PASS' if ok else 'FAIL'})")
    return "\n".join(lines)


def run(args: SeqparArgs, layout: RankLayout) -> int:
    """Run the benchmark on this rank of `layout` (the entry checked `args` against it); rank 0 prints
    the summary and writes results/seqpar.json.

    Returns 0, or 1 when --check fails.
    """
    ctx = bootstrap.init_distributed(layout, args.backend, args.device, args.gpu_map)
    check_memory(args, ctx)
    with bootstrap.abort_on_error(ctx):
        result = benchmark(args, ctx)
    bootstrap.shutdown(ctx)
    if ctx.rank == 0:
        path = timing.write_json(bootstrap.results_dir(args.results_dir) / RESULTS_FILE, result)
        print(summary(result), flush=True)
        print(f"  results: {path}", flush=True)
    if result["check"] and not all(c["passed"] for c in result["check"]):
        return 1
    return 0
