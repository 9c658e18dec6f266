"""Workloads hpcprof launches: `command` (any argv), `seqpar` and `ddp`.

Each built-in workload module exports a pydantic `Args` model (the experiment's
`workload.args`) and `launch_argv(args, python) -> list[str]`, the argv one rank runs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def workload_args_model(kind: str) -> type[BaseModel] | None:
    """The Args model of a built-in workload (None for `command`)."""
    if kind == "seqpar":
        from hpcprof.workloads.seqpar import SeqparArgs
        return SeqparArgs
    if kind == "ddp":
        from hpcprof.workloads.ddp import DdpArgs
        return DdpArgs
    return None


def rank_argv(kind: str, argv: list[str], args: Any, python: str) -> list[str]:
    """The command each rank runs (before the rank wrapper)."""
    if kind == "seqpar":
        from hpcprof.workloads.seqpar import launch_argv
        return launch_argv(args, python)
    if kind == "ddp":
        from hpcprof.workloads.ddp import launch_argv as ddp_argv
        return ddp_argv(args, python)
    return list(argv)
