"""`hpcprof nsys ...` commands."""

import click


@click.group("nsys")
def nsys() -> None:
    """Reports and distributed analyses of Nsight Systems exports (.sqlite / .nsys-rep)."""
