"""The DDP trainer's torch part: the user's model wrapped in DDP, the epochs with the profile window,
per-phase timing and the results.

`hpcprof.workloads.ddp` (the ranks' `python -m` entry) reads the Echo input, checks it against the
job's ranks and loads define_model.py without torch of its own, then calls `run` here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from hpcprof.core.errors import UserError
from hpcprof.core.models import dump
from hpcprof.workloads import bootstrap, timing
from hpcprof.workloads.args import DdpArgs, resolve_torch_schedule, torch_profile_tool_requested
from hpcprof.workloads.ranks import RankLayout

PHASES = ["forward", "backward", "optimizer", "step"]
RESULTS_FILE = "ddp_steps.json"
SCHEMA = "hpcprof.ddp/1"


@dataclass(frozen=True)
class Window:
    """The profiled iteration: global index (0-based, warm-up epochs included), epoch and step."""

    iteration: int
    epoch: int
    step: int


def profile_window(steps_per_epoch: int, epochs: int, warmup_epochs: int) -> Window:
    """Echo's window, warm-ups counted: the middle step of the last of warmup_epochs + epochs epochs."""
    if steps_per_epoch < 1 or epochs < 1 or warmup_epochs < 0:
        raise ValueError("need steps_per_epoch >= 1, epochs >= 1, warmup_epochs >= 0")
    last_epoch = warmup_epochs + epochs - 1
    step = steps_per_epoch // 2
    return Window(last_epoch * steps_per_epoch + step, last_epoch, step)


def make_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def ensure_ddp(model: Any, ctx: bootstrap.Dist, cap_size: float) -> DistributedDataParallel:
    """The user's model, wrapped in DDP(bucket_cap_mb=cap_size) unless get_model already did."""
    if isinstance(model, DistributedDataParallel):
        return model
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"get_model returned {type(model).__name__}, expected a torch.nn.Module")
    model = model.to(ctx.device)
    device_ids = [ctx.device.index] if ctx.is_cuda else None
    return DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=cap_size)


def model_inputs(batch: Any) -> Any:
    """Echo's batches are (inputs, labels); anything else is passed as is."""
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def train(args: DdpArgs, module: ModuleType, model_path: Path, ctx: bootstrap.Dist) -> dict[str, Any]:
    """Warm-up + counted epochs with per-phase timing, the profile window, and results gathered."""
    device_arg: int | torch.device = ctx.device.index if ctx.is_cuda else ctx.device
    model = ensure_ddp(module.get_model(device_arg, args.cap_size), ctx, args.cap_size)
    data = module.get_dataloader(device_arg, args.batchsize)
    if not hasattr(data, "__len__") or len(data) < 1:
        raise RuntimeError("get_dataloader must return a non-empty sized iterable (a list or a DataLoader)")
    steps = min(len(data), args.steps_per_epoch or len(data))
    total_epochs = args.warmup_epochs + args.epochs
    window = profile_window(steps, args.epochs, args.warmup_epochs)
    if args.profile_iteration is not None:
        window = Window(args.profile_iteration, *divmod(args.profile_iteration, steps))
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    forward: Callable[[Any, Any], Any] = module.forward_pass
    backward: Callable[[Any], Any] = module.backward_pass
    prof = None
    if torch_profile_tool_requested(args.torch_profiler):
        schedule = aligned_schedule(args.torch_schedule, window.iteration)
        prof = timing.make_torch_profiler(ctx.rank, schedule, timing.torch_gzip_requested(args.torch_gzip))
        prof.start()

    timer = timing.PhaseTimer(ctx.device)
    model.train()
    iteration = 0
    counted = contextlib.ExitStack()       # NVTX `timed` around the counted epochs: a profile's window
    for epoch in range(total_epochs):
        if epoch == args.warmup_epochs:
            counted.enter_context(timing.nvtx_range("timed"))
        with timing.nvtx_range(f"epoch {epoch}"):
            for batch, _ in zip(data, range(steps), strict=False):
                at_window = iteration == window.iteration
                if at_window and args.window == "step":
                    open_window(args.window_barrier, ctx)
                with timer.phase(iteration, "step"):
                    with timer.phase(iteration, "forward"):
                        output = forward(model, model_inputs(batch))
                    if at_window and args.window == "backward":
                        open_window(args.window_barrier, ctx)
                    with timer.phase(iteration, "backward"):
                        backward(output)
                    if at_window and args.window == "backward":
                        timing.profiler_stop()
                    with timer.phase(iteration, "optimizer"):
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                if at_window and args.window == "step":
                    timing.profiler_stop()
                if prof is not None:
                    prof.step()
                iteration += 1
        if ctx.is_cuda:
            torch.cuda.empty_cache()
    counted.close()
    if prof is not None:
        prof.stop()

    rows = []
    for row in timer.finish():
        epoch, step = divmod(row["iteration"], steps)
        counted = epoch >= args.warmup_epochs
        in_window = row["iteration"] == window.iteration
        rows.append({"rank": ctx.rank, **row, "epoch": epoch, "step": step, "counted": counted, "window": in_window})
    gathered = bootstrap.gather_objects({"rows": rows, "info": bootstrap.rank_info(ctx)})
    all_rows = [row for part in gathered for row in part["rows"]]
    params = sum(p.numel() for p in model.parameters())
    return {
        "schema": SCHEMA,
        "workload": "ddp",
        "config": dump(args)
        | {"world_size": ctx.world_size, "model_file": str(model_path), "parameters": params, "steps_per_epoch": steps},
        "versions": bootstrap.versions(ctx),
        "ranks": [part["info"] for part in gathered],
        "window": {
            "iteration": window.iteration,
            "epoch": window.epoch,
            "step": window.step,
            "mode": args.window,
            "total_epochs": total_epochs,
            "total_iterations": total_epochs * steps,
        },
        # Counted epochs without the window step, whose time holds the profiler's start and stop.
        "phases": timing.phase_stats([r for r in all_rows if r["counted"] and not r["window"]], PHASES),
        "steps": all_rows,
    }


def open_window(barrier: bool, ctx: bootstrap.Dist) -> None:
    """cudaProfilerStart; then, with `barrier` and several ranks, a barrier so that every rank is
    being captured before any starts the window (a profiler's start latency differs per rank)."""
    timing.profiler_start()
    if barrier and ctx.world_size > 1:
        with timing.nvtx_range("window barrier"):
            torch.distributed.barrier()


def aligned_schedule(flag_value: str | None, window_iteration: int) -> dict[str, int]:
    """The torch.profiler schedule, shifted (skip_first) so its first active step is the window."""
    schedule = resolve_torch_schedule(flag_value)
    schedule["skip_first"] += max(0, window_iteration - schedule["wait"] - schedule["warmup"])
    return schedule


def summary(result: dict[str, Any]) -> str:
    cfg, win = result["config"], result["window"]
    lines = [
        f"ddp: {cfg['world_size']} ranks, {cfg['parameters']:,} parameters, bucket_cap_mb={cfg['cap_size']}, "
        f"{cfg['warmup_epochs']} warm-up + {cfg['epochs']} epochs x {cfg['steps_per_epoch']} steps, "
        f"batch {cfg['batchsize']}, {cfg['optimizer']}, backend {result['versions']['backend']}, "
        f"{result['ranks'][0]['device_name']}",
        f"  window: iteration {win['iteration']} (epoch {win['epoch']}, step {win['step']}), around {win['mode']}",
        f"  {'phase':<12}{'mean ms':>10}{'min-rank':>10}{'max-rank':>10}{'median':>10}",
    ]
    for row in result["phases"]:
        lines.append(
            f"  {row['phase']:<12}{row['mean_ms']:>10.3f}{row['min_rank_mean_ms']:>10.3f}"
            f"{row['max_rank_mean_ms']:>10.3f}{row['median_ms']:>10.3f}"
        )
    return "\n".join(lines)


def run(args: DdpArgs, module: ModuleType, model_path: Path, layout: RankLayout) -> int:
    """Train the user's `module` (loaded from `model_path`) on this rank of `layout` with the resolved,
    checked `args`; rank 0 writes results/ddp_steps.json."""
    ctx = bootstrap.init_distributed(layout, args.backend, args.device, args.gpu_map)
    with bootstrap.abort_on_error(ctx):
        result = train(args, module, model_path, ctx)
    bootstrap.shutdown(ctx)
    if ctx.rank == 0:
        path = timing.write_json(bootstrap.results_dir(args.results_dir) / RESULTS_FILE, result)
        print(summary(result), flush=True)
        print(f"  results: {path}", flush=True)
    return 0
