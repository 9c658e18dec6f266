"""The `hpcprof` program: the console script and `python -m hpcprof`."""

import gc
import os
import sys

#: the `hpcprof nsys` commands with a quick lane
QUICK = ("stats", "nccl", "overlap", "gaps")


def main() -> None:
    """Run the command line in a process of its own. Its start-up (click, the command's modules and
    their libraries) makes objects that live as long as the process: the cyclic collector is paused
    until the command is resolved, then they are frozen (`hpcprof.cli.LazyGroup.resolve_command`),
    so that the collections of the command's work do not traverse them. When the command ends, so
    does the process: everything is frozen then, so that the interpreter's collections at exit skip
    what the OS frees anyway (exit handlers still run, and objects still go as their last reference
    does; only garbage cycles left uncollected at exit are not finalized, as Python never promises).

    `hpcprof nsys stats|nccl|overlap|gaps ... --format csv` goes first to the command's quick lane,
    which runs it without click where it reads the whole command line and the file
    (stats_command.quick).

    `hpcprof trace ...` and `hpcprof nsys ...` do no linear algebra and start no workload (nsys
    export at most): numpy's OpenBLAS is told to start no thread of its own, unless the user set
    OPENBLAS_NUM_THREADS (it starts one per core at numpy's import, which spin for ~0.1 s: `trace
    all` of 2 files of 72 MB on 2 cores 0.64 -> 0.57 CPU s; `nsys stats` of the memcpy/UM-heavy
    export 1.16 -> 1.05 CPU s; a core's time the other threads and workers lack on a busy machine)."""
    gc.disable()
    if sys.argv[1:2] in (["trace"], ["nsys"]):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.argv[1:2] == ["nsys"] and sys.argv[2:3] and sys.argv[2] in QUICK:
        from hpcprof.analysis.nsys import stats_command

        gc.freeze()
        gc.enable()
        code = stats_command.quick(sys.argv[2], sys.argv[3:])
        if code is not None:
            gc.freeze()
            sys.exit(code)
    from hpcprof.cli import main as command_line

    try:
        command_line()
    finally:
        gc.freeze()


if __name__ == "__main__":  # not when mpi4py.futures workers import the main module
    main()
