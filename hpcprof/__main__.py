"""The `hpcprof` program: the console script and `python -m hpcprof`."""

import gc


def main() -> None:
    """Run the command line in a process of its own. Its start-up (click, the command's modules and
    their libraries) makes objects that live as long as the process: the cyclic collector is paused
    until the command is resolved, then they are frozen (`hpcprof.cli.LazyGroup.resolve_command`),
    so that neither start-up nor the collections at exit traverse them."""
    gc.disable()
    from hpcprof.cli import main as command_line

    command_line()


if __name__ == "__main__":  # not when mpi4py.futures workers import the main module
    main()
