"""`hpcprof bench ...` commands: run a workload directly under any launcher.

The flags are the workload's own (`python -m hpcprof.workloads.<name> --help` lists the same);
torch is imported only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

T = TypeVar("T")

PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.group("bench")
def bench() -> None:
    """Run a built-in workload directly (under mpiexec, srun or torchrun)."""


@bench.command("seqpar", context_settings=PASS_THROUGH, add_help_option=False)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def seqpar_command(ctx: click.Context, argv: tuple[str, ...]) -> None:
    """Sequence-parallel all-gather/matmul/matmul/reduce-scatter benchmark (-h for its flags)."""
    from hpcprof.workloads import seqpar

    ctx.exit(seqpar.main(argv))


@bench.command("ddp", context_settings=PASS_THROUGH, add_help_option=False)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def ddp_command(ctx: click.Context, argv: tuple[str, ...]) -> None:
    """DDP trainer driven by an Echo input folder (--echo-input DIR; -h for its flags)."""
    from hpcprof.workloads import ddp

    ctx.exit(ddp.main(argv))


def flag_value(flag: str, parse: Callable[[str], T], text: str) -> T:
    """`parse(text)`; its ValueError as a one-line error naming the flag (exit 2)."""
    from hpcprof.core.errors import UserError

    try:
        return parse(text)
    except ValueError as exc:
        raise UserError(f"{flag} {text!r}: {exc}") from None


def count(low: int, high: int = 100000) -> Callable[[str], int]:
    """A parser of a whole number in low..high (ValueError otherwise)."""
    def parse(text: str) -> int:
        if not text.strip().isdigit() or not low <= int(text) <= high:
            raise ValueError(f"expected a whole number in {low}..{high}")
        return int(text)
    return parse


@bench.command("ceilings")
@click.option("--gemm", "gemms", multiple=True, metavar="M,N,K[:DTYPE]",
              help="a matmul to time (dtype float32 (TF32 off), tf32, bfloat16, float16; default bfloat16); repeatable")
@click.option("--collective", "collectives", multiple=True, metavar="OP:BYTES[:DTYPE]",
              help="all_gather, reduce_scatter or all_reduce of BYTES (nccl-tests' size: the all-gather's output, "
                   "the reduce-scatter's input; K/M/G = 1024^n) in float32 (default), bfloat16 or float16; repeatable")
@click.option("--sizes-from", type=click.Path(path_type=Path), default=None, metavar="RUN_DIR|EXPERIMENT",
              help="the sizes of a run's or an experiment's workload (seqpar: its matmuls and collectives) "
                   "when no --gemm/--collective is given")
@click.option("--iters", default="20", show_default=True, metavar="N", help="timed calls (1..100000)")
@click.option("--warmup", default="5", show_default=True, metavar="N", help="untimed calls first (0..100000)")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="auto: CUDA with NCCL where there is a GPU, else CPU with gloo")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="result JSON (rank 0); default $HPCPROF_RUN_DIR/ceilings.json, else ./ceilings.json")
@click.pass_context
def ceilings_command(ctx: click.Context, gemms: tuple[str, ...], collectives: tuple[str, ...],
                     sizes_from: Path | None, iters: str, warmup: str, device: str, out: Path | None) -> None:
    """Attainable GEMM TFLOP/s and collective bus bandwidth on the job's own ranks (nccl-tests' way)."""
    from hpcprof.core.safe_paths import check_output
    from hpcprof.workloads import ceiling_specs as specs

    if out is not None:   # never over the store, a run's file, the --sizes-from input, a special file or a link
        read = [sizes_from / "config.json" if sizes_from.is_dir() else sizes_from] if sizes_from is not None else []
        check_output(out, read, "--out")
    calls = flag_value("--iters", count(1), iters)
    warm = flag_value("--warmup", count(0), warmup)
    gemm_specs = [flag_value("--gemm", specs.parse_gemm, text) for text in gemms]
    coll_specs = [flag_value("--collective", specs.parse_collective, text) for text in collectives]
    if not gemm_specs and not coll_specs:
        kind, args, world = specs.sizes_from(sizes_from) if sizes_from is not None else ("command", {}, 1)
        gemm_specs, coll_specs = specs.default_specs(kind, args, world)
    from hpcprof.workloads.ranks import discover_layout

    layout = discover_layout()
    specs.check_all_fit(coll_specs, layout.world_size)   # before torch loads: a refused run never imports it
    from hpcprof.workloads import ceilings

    ctx.exit(ceilings.run(gemm_specs, coll_specs, calls, warm, out, "cpu" if device == "cpu" else
                          "cuda" if device == "cuda" else "auto", layout))
