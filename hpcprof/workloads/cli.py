"""`hpcprof bench ...` commands: run a workload directly under any launcher."""

import click


@click.group("bench")
def bench() -> None:
    """Run a built-in workload directly (under mpiexec, srun or torchrun)."""
