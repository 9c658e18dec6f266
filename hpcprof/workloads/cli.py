"""`hpcprof bench ...` commands: run a workload directly under any launcher.

The flags are the workload's own (`python -m hpcprof.workloads.<name> --help` lists the same);
torch is imported only when a command runs.
"""

from __future__ import annotations

import click

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
