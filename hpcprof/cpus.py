"""The CPUs this process may run on: those of its affinity mask (a Slurm or PBS job's cpuset,
`taskset`, a container's), not the machine's. On a shared node a job given 8 of 128 cores that
started a process per core of the machine would run 16 processes on each of its own."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """How many CPUs this process may run on (os.sched_getaffinity where the platform has it, else
    os.cpu_count), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
