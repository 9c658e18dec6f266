"""Schedulers by name (site config `scheduler:`): local, slurm, pbs (PBS Pro, OpenPBS), torque, kubernetes."""

from __future__ import annotations

import importlib

from hpcprof.schedulers.base import Scheduler

#: name -> "module:class", imported on first use
REGISTRY = {
    "local": "hpcprof.schedulers.local:LocalScheduler",
    "slurm": "hpcprof.schedulers.slurm:SlurmScheduler",
    "pbs": "hpcprof.schedulers.pbs:PbsScheduler",
    "torque": "hpcprof.schedulers.pbs:TorqueScheduler",
    "kubernetes": "hpcprof.schedulers.kubernetes:KubernetesScheduler",
}


def get_scheduler(name: str) -> Scheduler:
    """The scheduler registered under `name`."""
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)()
