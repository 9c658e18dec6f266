"""DDP trainer harness driven by an Echo input folder (define_model.py + local/global_config.json).

The folder is used unchanged: `define_model.py` provides `get_model(rank, cap_size)`,
`get_dataloader(rank, batchsize)`, `forward_pass(model, inputs)` and `backward_pass(output)`.
hpcprof passes as `rank` the local device: the CUDA device index on GPU (Echo's `rank` on one
node) or `torch.device("cpu")` on CPU.

One iteration in the middle of the last counted epoch is the profile window (Echo's rule, with
warm-up epochs counted): NVTX `forward`/`backward`/`optimizer` ranges, and cudaProfilerStart/Stop
around the backward pass (default) or the whole step.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from hpcprof.core.errors import UserError
from hpcprof.core.models import dump, given_fields, validate
from hpcprof.workloads import bootstrap, options, timing
from hpcprof.workloads.args import DdpArgs, launch_argv  # noqa: F401  (re-exported; torch-free)

REQUIRED_FUNCTIONS = ("get_model", "get_dataloader", "forward_pass", "backward_pass")
LOCAL_CONFIG_KEYS = ("world_size", "cap_size", "epochs", "batchsize", "warmup_epochs")
GLOBAL_CONFIG_KEYS = ("cuda_visible_devices", "cuda_version_check")  # the tool paths: ignored, with a warning
PHASES = ["forward", "backward", "optimizer", "step"]
RESULTS_FILE = "ddp_steps.json"
SCHEMA = "hpcprof.ddp/1"


def parser() -> argparse.ArgumentParser:
    return options.build_parser(DdpArgs, "hpcprof-ddp", __doc__.splitlines()[0], {})


def parse_args(argv: Sequence[str]) -> DdpArgs:
    return options.parse_argv(DdpArgs, parser(), argv, "ddp")


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


def read_json_config(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; a missing file, bad JSON or a non-object is a UserError."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


@dataclass(frozen=True)
class EchoInput:
    """An Echo input folder as read from disk."""

    folder: Path
    model_file: Path
    local_config: dict[str, Any]
    global_config: dict[str, Any]


def load_echo_input(folder: Path) -> EchoInput:
    """Read an Echo input folder; local_config.json keys are checked, global_config.json is read as is."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: Echo input folder not found")
    local_path = folder / "local_config.json"
    local = read_json_config(local_path)
    unknown = sorted(set(local) - set(LOCAL_CONFIG_KEYS))
    if unknown:
        raise UserError(f"{local_path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(LOCAL_CONFIG_KEYS)}")
    global_path = folder / "global_config.json"
    global_ = read_json_config(global_path) if global_path.exists() else {}
    return EchoInput(folder, folder / "define_model.py", local, global_)


def resolve_args(args: DdpArgs) -> DdpArgs:
    """Defaults < the Echo folder's configs < fields set explicitly in `args`."""
    merged: dict[str, Any] = {}
    if args.echo_input is not None:
        echo = load_echo_input(args.echo_input)
        if os.environ.get("HPCPROF_RANK", "0") == "0":  # submit said it too; `bench ddp` users see it here
            from hpcprof.workloads.args import echo_global_config_notes

            for line in echo_global_config_notes(echo.folder):
                print(f"hpcprof: {line}", file=sys.stderr)
        for path, values in (
            (echo.folder / "local_config.json", echo.local_config),
            (echo.folder / "global_config.json", {k: echo.global_config[k] for k in GLOBAL_CONFIG_KEYS if k in echo.global_config}),
        ):
            values = {k: (None if v == "" else v) for k, v in values.items()}
            validate(DdpArgs, {"echo_input": echo.folder, **values}, str(path))
            merged.update(values)
    merged.update({name: getattr(args, name) for name in given_fields(args)})
    return validate(DdpArgs, merged, "ddp")


def model_file(args: DdpArgs) -> Path:
    """The define_model.py to load."""
    path = args.model_file if args.model_file is not None else Path(args.echo_input or ".") / "define_model.py"
    if not path.is_file():
        raise UserError(f"{path}: define_model.py not found")
    return path


def load_model_module(path: Path) -> ModuleType:
    """Import the user's define_model.py (its folder goes on sys.path for sibling imports)."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"hpcprof_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any failure of user code at import is bad input
        detail = " ".join(str(exc).split())
        raise UserError(f"{path}: import failed: {type(exc).__name__}: {detail}") from None
    missing = [name for name in REQUIRED_FUNCTIONS if not callable(getattr(module, name, None))]
    if missing:
        raise UserError(f"{path}: missing function(s) {', '.join(missing)}; needs {', '.join(REQUIRED_FUNCTIONS)}")
    return module


def check_cuda_version(expected: str | None) -> None:
    """Compare major.minor of torch's CUDA with `expected`; a mismatch is a UserError."""
    if not expected:
        return
    want = ".".join(str(expected).split(".")[:2])
    have = torch.version.cuda
    if have is None:
        raise UserError(f"cuda_version_check: {want} expected, but torch {torch.__version__} has no CUDA")
    have_mm = ".".join(have.split(".")[:2])
    if have_mm != want:
        raise UserError(f"cuda_version_check: {want} expected, torch {torch.__version__} is built with CUDA {have}")


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


def train(args: DdpArgs, module: ModuleType, ctx: bootstrap.Dist) -> dict[str, Any]:
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
    if timing.torch_profile_tool_requested(args.torch_profiler):
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
        | {"world_size": ctx.world_size, "model_file": str(model_file(args)), "parameters": params, "steps_per_epoch": steps},
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
    schedule = timing.resolve_torch_schedule(flag_value)
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


def run(args: DdpArgs) -> int:
    """Resolve the Echo input, check it on every rank, then train; rank 0 writes results/ddp_steps.json."""
    args = resolve_args(args)
    check_cuda_version(args.cuda_version_check)
    if args.cuda_visible_devices and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.cuda_visible_devices
    module = load_model_module(model_file(args))
    layout = bootstrap.discover_layout()
    if args.world_size is not None and args.world_size != layout.world_size:
        raise UserError(f"ddp: world_size: the config asks for {args.world_size} ranks, the launcher started {layout.world_size}")
    if timing.torch_profile_tool_requested(args.torch_profiler):
        timing.check_schedule_fits("ddp", args.torch_schedule, None)
    ctx = bootstrap.init_distributed(layout, args.backend, args.device, args.gpu_map)
    with bootstrap.abort_on_error(ctx):
        result = train(args, module, ctx)
    bootstrap.shutdown(ctx)
    if ctx.rank == 0:
        path = timing.write_json(bootstrap.results_dir(args.results_dir) / RESULTS_FILE, result)
        print(summary(result), flush=True)
        print(f"  results: {path}", flush=True)
    return 0


def main(argv: Sequence[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    options.run_module_main(main)
