"""Sequence-parallel mini-benchmark (ALCF hands-on), per Megatron sequence parallelism.

Per iteration, with p ranks:
    input [S/p, H] --all_gather_into_tensor--> [S, H] --@ W1 [H, H/p]--> [S, H/p]
    --@ W2 [H/p, H]--> [S, H] --reduce_scatter_tensor--> [S/p, H]

Run under any launcher: `mpiexec -n 4 python -m hpcprof.workloads.seqpar -s 4608 -d 9216 -p bfloat16`.
This module, the ranks' entry, parses and checks the arguments against the job's ranks without
torch, so that a refused run imports torch on no rank; the benchmark is `hpcprof.workloads.seqpar_bench`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hpcprof.core.errors import UserError
from hpcprof.workloads import options
from hpcprof.workloads.args import (  # noqa: F401  (launch_argv re-exported; torch-free)
    SeqparArgs,
    check_schedule_fits,
    launch_argv,
    torch_profile_tool_requested,
)
from hpcprof.workloads.ranks import discover_layout

SHORT_FLAGS = {
    "sequence_length": ("-s", "--sequence_length"),
    "hidden_dim": ("-d", "--hidden_dimension"),
    "iterations": ("-it",),
    "warmup_iterations": ("-wit", "--warmup_iterations"),
    "precision": ("-p",),
}


def parser() -> argparse.ArgumentParser:
    return options.build_parser(SeqparArgs, "hpcprof-seqpar", __doc__.splitlines()[0], SHORT_FLAGS)


def parse_args(argv: Sequence[str]) -> SeqparArgs:
    return options.parse_argv(SeqparArgs, parser(), argv, "seqpar")


def check_divisible(args: SeqparArgs, world_size: int) -> None:
    """S and H must split evenly over the ranks."""
    for field, value in (("sequence_length", args.sequence_length), ("hidden_dim", args.hidden_dim)):
        if value % world_size:
            raise UserError(f"seqpar: {field}: {value} is not divisible by the {world_size} ranks")


def run(args: SeqparArgs) -> int:
    """Check `args` against the job's ranks, then run the benchmark (importing torch only then).

    Returns 0, or 1 when --check fails.
    """
    layout = discover_layout()
    check_divisible(args, layout.world_size)
    if torch_profile_tool_requested(args.torch_profiler):
        check_schedule_fits("seqpar", args.torch_schedule, args.iterations)
    from hpcprof.workloads import seqpar_bench

    return seqpar_bench.run(args, layout)


def main(argv: Sequence[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    options.run_module_main(main)
