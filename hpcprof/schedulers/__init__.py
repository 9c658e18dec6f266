"""Schedulers by name (site config `scheduler:`): local, slurm, pbs (PBS Pro, OpenPBS), torque, kubernetes.

The names and classes are listed once, in hpcprof.config.schedulers."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hpcprof.config.schedulers import REGISTRY, SCHEDULER_NAMES

if TYPE_CHECKING:
    from hpcprof.schedulers.base import Scheduler

__all__ = ["REGISTRY", "SCHEDULER_NAMES", "get_scheduler"]


def get_scheduler(name: str) -> Scheduler:
    """The scheduler registered under `name`."""
    module, _, cls = REGISTRY[name].target.partition(":")
    scheduler: Scheduler = getattr(importlib.import_module(module), cls)()
    return scheduler
