"""The CPUs this process may run on: those of its affinity mask (a Slurm or PBS job's cpuset,
`taskset`, a container's), not the machine's. On a shared node a job given 8 of 128 cores that
started a process per core of the machine would run 16 processes on each of its own. And the
number of worker processes the commands that map over rank files start unless told otherwise
(`default_workers`: those CPUs, fewer where the memory available would not hold them). And how
this process's malloc keeps the memory it frees (`keep_freed_memory`)."""

from __future__ import annotations

import os
import sys


def usable_cpus() -> int:
    """How many CPUs this process may run on (os.sched_getaffinity where the platform has it, else
    os.cpu_count), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


#: memory planned for one worker process that analyses rank files (its imports, ~150 MB, and one
#: rank's tables; collect's workers' peak: benchmarks/results/comment_measurements.txt)
WORKER_BYTES = 1 << 30


def available_memory() -> int | None:
    """Bytes this process may still allocate: the kernel's MemAvailable, less where the process's
    cgroup (a Slurm or PBS job's, a container's) allows less; None where neither is known."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as fh:
            found += [int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as fh, open("/sys/fs/cgroup/memory.current") as used:
            limit = fh.read().strip()
            if limit != "max":
                found.append(max(0, int(limit) - int(used.read().strip())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def default_workers(worker_bytes: int = WORKER_BYTES) -> tuple[int, str]:
    """Worker processes to use unless told otherwise: one per CPU this process may use, fewer where
    the memory available does not hold `worker_bytes` for each; with the reason, for the log."""
    cpus, memory = usable_cpus(), available_memory()
    by_memory = cpus if memory is None else max(1, memory // worker_bytes)
    if memory is not None and by_memory < cpus:
        return by_memory, (f"{cpus} CPUs this process may use, bounded by memory: {memory / 2**30:.1f} GiB available, "
                           f"{worker_bytes / 2**30:.1f} GiB a worker")
    return cpus, f"the CPU{'s' if cpus > 1 else ''} this process may use"


#: glibc's mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(heap_block_bytes: int, kept_free_bytes: int) -> bool:
    """Have glibc's malloc, in this process, serve blocks up to `heap_block_bytes` from the heap
    rather than map each one afresh, and keep up to `kept_free_bytes` of freed heap rather than hand
    it back to the OS: memory the process frees and allocates again is then not faulted in and
    zeroed again. False where that cannot be set (not Linux, or a C library without mallopt):
    nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, heap_block_bytes)) and bool(mallopt(M_TRIM_THRESHOLD, kept_free_bytes))
