"""The one table of schedulers by name (site config `scheduler:`): where each class lives and the
batch-directive dialect its job scripts are written in.

It imports nothing of hpcprof, so the site schema (hpcprof.config, below the scheduler modules)
takes its scheduler names and directive rules from here; `hpcprof.schedulers.get_scheduler`
imports a class on first use. Adding a scheduler (LSF, ...) is one module plus one line here.
"""

from __future__ import annotations

from typing import NamedTuple


class SchedulerEntry(NamedTuple):
    """One scheduler: its class as "module:Class", and the dialect of its batch directives
    ("pbs": #PBS lines, "slurm": #SBATCH lines; None: no batch script) that hpcprof.config.directives
    checks values and rendered scripts against."""

    target: str
    dialect: str | None


REGISTRY: dict[str, SchedulerEntry] = {
    "local": SchedulerEntry("hpcprof.schedulers.local:LocalScheduler", None),
    "slurm": SchedulerEntry("hpcprof.schedulers.slurm:SlurmScheduler", "slurm"),
    "pbs": SchedulerEntry("hpcprof.schedulers.pbs:PbsScheduler", "pbs"),
    "torque": SchedulerEntry("hpcprof.schedulers.pbs:TorqueScheduler", "pbs"),
    "kubernetes": SchedulerEntry("hpcprof.schedulers.kubernetes:KubernetesScheduler", None),
}
#: the names a site's `scheduler:` may take
SCHEDULER_NAMES: tuple[str, ...] = tuple(REGISTRY)


def dialect(name: str) -> str | None:
    """The batch-directive dialect of scheduler `name` (None: no batch script, or not a scheduler)."""
    entry = REGISTRY.get(name)
    return entry.dialect if entry else None
