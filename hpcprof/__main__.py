"""The `hpcprof` program: the console script and `python -m hpcprof`."""

import gc
import os
import sys

#: what the commands that read large profiles set in their own environment before numpy is imported,
#: where the user has not (see main)
COMMAND_ENV = {"trace": {"OPENBLAS_NUM_THREADS": "1"},
               "nsys": {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": "0"}}


def main() -> None:
    """Run the command line in a process of its own. Its start-up (click, the command's modules and
    their libraries) makes objects that live as long as the process: the cyclic collector is paused
    until the command is resolved, then they are frozen (`hpcprof.cli.LazyGroup.resolve_command`),
    so that the collections of the command's work do not traverse them. When the command ends, so
    does the process: everything is frozen then, so that the interpreter's collections at exit skip
    what the OS frees anyway (exit handlers still run, and objects still go as their last reference
    does; only garbage cycles left uncollected at exit are not finalized, as Python never promises).

    `hpcprof trace ...` and `hpcprof nsys ...` do no linear algebra and start no workload (nsys
    export at most): numpy's OpenBLAS is told to start no thread of its own, unless the user set
    OPENBLAS_NUM_THREADS (it starts one per core at numpy's import, which spin for ~0.1 s: `trace
    all` of 2 files of 72 MB on 2 cores 0.64 -> 0.57 CPU s; `nsys stats` of the memcpy/UM-heavy
    export 1.16 -> 1.05 CPU s; a core's time the other threads and workers lack on a busy machine).

    `hpcprof nsys ...` also has numpy ask for no transparent huge pages (numpy's madvise for arrays
    of 4 MB or more), unless the user set NUMPY_MADVISE_HUGEPAGE: where THP is in madvise mode, a
    fault on such an array may first compact memory for a 2 MB page, and a short command that
    fills its arrays once gains nothing from them. nsys 2022.4's default set on the four export
    shapes of benchmarks/nsys_stats_speed.py, each run alternated with nsys's own (medians of 7-9):
    kernel-heavy 0.82 -> 0.74 s, NVTX-heavy 0.63 -> 0.59 s, memcpy/UM-heavy 0.71 -> 0.68 s,
    CUDA-API-heavy 0.95 -> 0.94 s. `trace all` of 2 files of 72 MB did not change (0.42 s), so the
    trace commands keep numpy's default."""
    gc.disable()
    for name, value in COMMAND_ENV.get(sys.argv[1] if len(sys.argv) > 1 else "", {}).items():
        os.environ.setdefault(name, value)
    from hpcprof.cli import main as command_line

    try:
        command_line()
    finally:
        gc.freeze()


if __name__ == "__main__":  # not when mpi4py.futures workers import the main module
    main()
