"""The `hpcprof` command line."""

from __future__ import annotations

import click

from hpcprof.analysis.ncu.cli import ncu
from hpcprof.analysis.nsys.cli import nsys
from hpcprof.analysis.trace.cli import trace
from hpcprof.workloads.cli import bench


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpcprof")
def main() -> None:
    """Profile distributed PyTorch work on HPC clusters."""


main.add_command(nsys)
main.add_command(trace)
main.add_command(ncu)
main.add_command(bench)
