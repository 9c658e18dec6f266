"""`hpcprof ncu ...` commands."""

import click


@click.group("ncu")
def ncu() -> None:
    """Nsight Compute kernel metrics (Echo's table) from ncu CSV exports or .ncu-rep."""
