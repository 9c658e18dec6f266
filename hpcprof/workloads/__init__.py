"""Workloads hpcprof launches: `command` (any argv), `seqpar` and `ddp`.

The built-in workloads' Args models (the experiment's `workload.args`) and
`launch_argv(args, python) -> list[str]`, the argv one rank runs, live in the torch-free
`hpcprof.workloads.args`, so that rendering and submitting never import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcprof.workloads.args import Options


def workload_args_model(kind: str) -> type[Options] | None:
    """The Args model of a built-in workload (None for `command`)."""
    from hpcprof.workloads.args import ARGS_MODELS

    return ARGS_MODELS.get(kind)


def rank_argv(kind: str, argv: list[str], args: Any, python: str) -> list[str]:
    """The command each rank runs (before the rank wrapper)."""
    from hpcprof.workloads.args import MODULES, kind_argv

    if kind in MODULES:
        return kind_argv(kind, args, python)
    return list(argv)
