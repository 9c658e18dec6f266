"""The one table of profilers by name (an experiment's `profile.tool`): nsys, ncu, torch and none
built in, and the tools installed packages add through the `hpcprof.profilers` entry points.

A built-in tool is one package (hpcprof/tools/<tool>/), declared in its `profiler` module as one
`Profiler` (hpcprof.tools.base): the program the rank wrapper starts and the site's `paths:` key
that names it, the suffixes of its per-rank files under `profiles/<tool>/`, the model of its
`profile.<tool>:` options, how a profiled rank is started (`Launch`), its check of an experiment
point, its capture hook (the options it starts with when the optimizer step hook opens its capture
range), its collector (a ToolCollector as "module:Class", imported only when a run of it is
collected), the roles of its result tables (iterations, window, critical path, kernels,
collectives), its result tables' declarations (hpcprof.core.catalog.ToolCatalog, from its package's
`tables` module: gathered here with the tool-neutral ones, `catalogs`), its headline metrics and
report figures, its `hpcprof diff` loader and the functions
hpcprof.api offers for it (as "module:function"s). The experiment schema, render, doctor, collect,
the summary, the report, the diff and the API look tools up here instead of naming them; this
package imports nothing above hpcprof's base modules and the tools' declarations, so the config
models take their tools from it.

Adding a tool is one package with its `Profiler` (and its collector) plus one registration: a line
in BUILTIN here, or, from a package of its own, an entry point of the group `hpcprof.profilers`
named for the tool and naming its Profiler (pyproject.toml):

    [project.entry-points."hpcprof.profilers"]
    rocprof = "my_package.rocprof:PROFILER"

Entry points are read only when a name is not built in (or every tool is listed: doctor), so the
commands that list or render never pay for them. A tool from an entry point takes no `profile.<tool>:`
block (ProfileConfig's fields are the built-in tools' options): its `options` is None.
"""

from __future__ import annotations

import functools

from hpcprof.core.catalog import ToolCatalog
from hpcprof.core.errors import UserError
from hpcprof.tools.base import KernelTime, Launch, Profiler, Tables
from hpcprof.tools.ncu import profiler as ncu
from hpcprof.tools.nsys import profiler as nsys
from hpcprof.tools.torch import profiler as torch

__all__ = ["BUILTIN", "ENTRY_POINTS", "KernelTime", "Launch", "Profiler", "Tables", "catalogs", "every", "find",
           "get", "installed"]

#: the entry point group of the tools other packages add
ENTRY_POINTS = "hpcprof.profilers"
#: the built-in tools, in the order they are listed
BUILTIN: dict[str, Profiler] = {p.name: p for p in (nsys.PROFILER, ncu.PROFILER, torch.PROFILER, Profiler("none"))}


@functools.cache
def installed() -> dict[str, Profiler]:
    """The tools installed packages add (entry points of ENTRY_POINTS), by name; one that does not
    load, is not a Profiler of its own name or takes a built-in name is a one-line error."""
    from importlib.metadata import entry_points

    found: dict[str, Profiler] = {}
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda p: p.name):
        where = f"profiler {point.name!r} (entry point {point.value} of group {ENTRY_POINTS})"
        try:
            entry = point.load()
        except Exception as exc:  # the package's own code: its failure is named, not a traceback
            raise UserError(f"{where}: does not load ({type(exc).__name__}: {exc}); fix or uninstall the "
                            "package that declares it") from None
        if not isinstance(entry, Profiler) or entry.name != point.name or point.name in BUILTIN:
            raise UserError(f"{where}: not a hpcprof.profilers.Profiler named {point.name!r} beside the built-in "
                            f"{', '.join(BUILTIN)}; fix the package that declares it")
        if entry.options is not None:
            raise UserError(f"{where}: takes options, which only a built-in tool can (its options must be None)")
        found[point.name] = entry
    return found


def find(name: str) -> Profiler | None:
    """The tool called `name`, None when there is none (entry points read only for a name not built in)."""
    return BUILTIN.get(name) or installed().get(name)


def get(name: str) -> Profiler:
    """The tool called `name`; a one-line error when there is none."""
    entry = find(name)
    if entry is None:
        raise UserError(f"profile.tool {name!r}: no such profiler here (known: {', '.join(every())}; a package "
                        f"adds one with an entry point of group {ENTRY_POINTS})")
    return entry


def every() -> dict[str, Profiler]:
    """Every tool by name: the built-in ones, then the installed ones."""
    return {**BUILTIN, **installed()}


def catalogs() -> dict[str, ToolCatalog]:
    """The built-in tools' declarations by name, in their order: their result tables and their part in
    the tool-neutral metrics (hpcprof.core.catalog's every_table, table_window, metrics_page take them)."""
    return {name: entry.catalog for name, entry in BUILTIN.items()}
