"""DDP trainer harness driven by an Echo input folder (define_model.py + local/global_config.json).

The folder is used unchanged: `define_model.py` provides `get_model(rank, cap_size)`,
`get_dataloader(rank, batchsize)`, `forward_pass(model, inputs)` and `backward_pass(output)`.
hpcprof passes as `rank` the local device: the CUDA device index on GPU (Echo's `rank` on one
node) or `torch.device("cpu")` on CPU.

One iteration in the middle of the last counted epoch is the profile window (Echo's rule, with
warm-up epochs counted): NVTX `forward`/`backward`/`optimizer` ranges, and cudaProfilerStart/Stop
around the backward pass (default) or the whole step.

This module, the ranks' entry, reads the Echo input, checks it against the job's ranks and loads
define_model.py without torch of its own (the model's imports are the user's), so that a refused
run imports torch on no rank where the model does not; the trainer is `hpcprof.workloads.ddp_train`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from hpcprof.core.errors import UserError
from hpcprof.core.models import given_fields, validate
from hpcprof.workloads import options
from hpcprof.workloads.args import (  # noqa: F401  (launch_argv re-exported; torch-free)
    DdpArgs,
    check_schedule_fits,
    launch_argv,
    torch_profile_tool_requested,
)
from hpcprof.workloads.ranks import discover_layout

REQUIRED_FUNCTIONS = ("get_model", "get_dataloader", "forward_pass", "backward_pass")
LOCAL_CONFIG_KEYS = ("world_size", "cap_size", "epochs", "batchsize", "warmup_epochs")
GLOBAL_CONFIG_KEYS = ("cuda_visible_devices", "cuda_version_check")  # the tool paths: ignored, with a warning


def parser() -> argparse.ArgumentParser:
    return options.build_parser(DdpArgs, "hpcprof-ddp", __doc__.splitlines()[0], {})


def parse_args(argv: Sequence[str]) -> DdpArgs:
    return options.parse_argv(DdpArgs, parser(), argv, "ddp")


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
    import torch

    want = ".".join(str(expected).split(".")[:2])
    have = torch.version.cuda
    if have is None:
        raise UserError(f"cuda_version_check: {want} expected, but torch {torch.__version__} has no CUDA")
    have_mm = ".".join(have.split(".")[:2])
    if have_mm != want:
        raise UserError(f"cuda_version_check: {want} expected, torch {torch.__version__} is built with CUDA {have}")


def run(args: DdpArgs) -> int:
    """Resolve the Echo input and check it on every rank (against the job's ranks too), load the model,
    then train (importing torch only then, where the model did not)."""
    args = resolve_args(args)
    if args.cuda_visible_devices and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.cuda_visible_devices
    layout = discover_layout()
    if args.world_size is not None and args.world_size != layout.world_size:
        raise UserError(f"ddp: world_size: the config asks for {args.world_size} ranks, the launcher started {layout.world_size}")
    if torch_profile_tool_requested(args.torch_profiler):
        check_schedule_fits("ddp", args.torch_schedule, None)
    check_cuda_version(args.cuda_version_check)
    path = model_file(args)
    module = load_model_module(path)
    from hpcprof.workloads import ddp_train

    return ddp_train.run(args, module, path, layout)


def main(argv: Sequence[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    options.run_module_main(main)
