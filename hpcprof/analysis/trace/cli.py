"""`hpcprof trace ...` commands."""

import click


@click.group("trace")
def trace() -> None:
    """HTA's analyses of torch.profiler (Kineto) traces, one file per rank."""
