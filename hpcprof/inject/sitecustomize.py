"""hpcprof's start-up hook for a rank's Python (see hpcprof.inject): arm what the rank wrapper
asked for, then run the `sitecustomize` this one shadows. A failure to arm is one line on stderr
and the program runs on, unchanged."""

from __future__ import annotations

import os
import sys

#: set in the rank's first Python: its Python children (data loader workers, subprocesses) are not armed again
ARMED = "HPCPROF_ARMED_PID"


def _arm() -> None:
    if os.environ.get("HPCPROF_STEPS") == "1" and os.environ.get("HPCPROF_RUN_DIR"):
        import _hpcprof_steps  # in every Python of the rank: the first whose optimizer steps records them

        _hpcprof_steps.arm()
    if os.environ.get(ARMED) or not os.environ.get("HPCPROF_RUN_DIR"):
        return
    os.environ[ARMED] = str(os.getpid())
    if os.environ.get("HPCPROF_FORENSICS") == "1":
        import _hpcprof_forensics

        _hpcprof_forensics.arm()


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path (a distribution's or a virtual environment's), as
    Python would have without this directory first."""
    from importlib._bootstrap import module_from_spec  # importlib.util's, without importing it
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _arm()
except Exception as exc:  # never stop the user's program
    sys.stderr.write(f"hpcprof: start-up hook not armed ({type(exc).__name__}: {exc})\n")
_chain()
