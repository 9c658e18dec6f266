"""An experiment's `forensics:` block: what every rank records so that a hung or crashed run can
be explained (hpcprof.analysis.forensics), armed by default.

With `enabled` (the default) the rank wrapper puts hpcprof's start-up hook first on the ranks'
PYTHONPATH (hpcprof.inject: faulthandler on fatal signals and SIGUSR1, a record of the uncaught
exception, the Flight Recorder dumped on a request) and sets PyTorch's Flight Recorder variables
(each only where the experiment's or site's env leaves it unset), and the job asks every rank for
its stacks and Flight Recorder `warning_seconds` before the walltime (at most half the walltime):
Slurm's `--signal=B:USR1@N`, a timer in the job script elsewhere. `enabled: false` renders the job
as without forensics.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from hpcprof.core.models import Model

#: seconds between a rank's looks for a dump request (the start-up hook's watcher)
POLL_SECONDS = 1.0


class ForensicsConfig(Model):
    """Flight Recorder, stacks and exception records of every rank (`forensics.enabled: false` turns it off)."""

    enabled: bool = True
    # seconds before the walltime at which every rank dumps its stacks and Flight Recorder
    warning_seconds: Annotated[int, Meta(ge=1, le=86400)] = 120
    # Flight Recorder entries kept per rank (TORCH_FR_BUFFER_SIZE; TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.8)
    buffer: Annotated[int, Meta(ge=1, le=1 << 20)] = 2000
