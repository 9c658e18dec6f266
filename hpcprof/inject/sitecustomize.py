"""hpcprof's start-up hook for a rank's Python (see hpcprof.inject): arm what the rank wrapper
asked for, then run the `sitecustomize` this one shadows. A failure to arm is one line on stderr
(where the program has one) and the program runs on, unchanged."""

from __future__ import annotations

import os
import sys

#: set in the rank's first Python (its pid): its Python children (data loader workers, subprocesses)
#: are not armed again; the same process re-executing itself (os.execv) is
ARMED = "HPCPROF_ARMED_PID"
#: the module whose presence beside a `sitecustomize` marks it as this hook (a link or copy of it)
MARKER = "_hpcprof_files.py"


def _arm() -> None:
    run_dir = os.environ.get("HPCPROF_RUN_DIR")
    if not run_dir:
        return
    armed = os.environ.get(ARMED)
    first = not armed or armed == str(os.getpid())
    import _hpcprof_files

    try:
        _hpcprof_files.rank()
        if not (os.path.isabs(run_dir) and os.path.isdir(run_dir)):
            raise ValueError(f"HPCPROF_RUN_DIR {run_dir[:200]!r} is not a directory")
    except ValueError as exc:
        if first:
            _hpcprof_files.say(f"hpcprof: start-up hook not armed ({exc})")
        return
    if os.environ.get("HPCPROF_STEPS") == "1":
        import _hpcprof_steps  # in every Python of the rank: the first whose optimizer steps records them

        _hpcprof_steps.arm()
    if not first:
        return
    os.environ[ARMED] = str(os.getpid())
    if os.environ.get("HPCPROF_FORENSICS") == "1":
        import _hpcprof_forensics

        _hpcprof_forensics.arm()


def _hook(entry: str) -> bool:
    """Whether the sys.path `entry` holds this hook (its directory, a link to it, a copy)."""
    directory = entry or os.curdir
    try:
        return (os.path.samefile(os.path.join(directory, "sitecustomize.py"), __file__)
                or os.path.isfile(os.path.join(directory, MARKER)))
    except OSError:
        return False


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path (a distribution's, a virtual environment's, the
    user's), as Python would have without this hook: every entry holding this hook is passed over."""
    from importlib._bootstrap import module_from_spec  # importlib.util's, without importing it
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("sitecustomize", [entry for entry in sys.path if not _hook(entry)])
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _arm()
except Exception as exc:  # never stop the user's program
    try:
        sys.stderr.write(f"hpcprof: start-up hook not armed ({type(exc).__name__}: {exc})\n")
    except Exception:
        pass
_chain()
