"""The profilers that are programs on a site's nodes (those of the profiler table with a program:
nsys, ncu; torch.profiler runs inside the workload): where the site says they are (`hpcprof doctor`
probes those after the site's setup), and the check at submit on a local site (elsewhere the
job-start checks of the rendered script do it on the compute node)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

import msgspec

from hpcprof import profilers
from hpcprof.config.site import SiteConfig
from hpcprof.core.errors import UserError


def profiler_paths(site: SiteConfig, tools: Iterable[str] | None = None) -> dict[str, str]:
    """Each profiler program -> the site's `paths.<key>` (a name on PATH or a full path), in the table's
    order: of `tools`, else of every tool (installed ones too)."""
    if tools is None:
        entries = list(profilers.every().values())
    else:
        wanted = set(tools)
        entries = [p for name, p in profilers.BUILTIN.items() if name in wanted] + \
            [profilers.get(name) for name in sorted(wanted - profilers.BUILTIN.keys())]
    paths = msgspec.structs.asdict(site.paths)
    return {p.name: program for p in entries if (program := p.program_in(paths)) is not None}


def check_local_profilers(site: SiteConfig, tools: set[str]) -> list[str]:
    """At submit on a local site: each requested profiler program is on PATH here; its version
    lines. A missing one is a one-line error naming the site's paths key (never a 127 after the fact)."""
    lines = []
    for tool, path in profiler_paths(site, tools).items():
        found = shutil.which(path)
        if found is None:
            key = profilers.get(tool).paths_key
            fix = f"set paths.{key} of site {site.name} to its full path" if key else "put it on PATH"
            raise UserError(f"profile.tool: {tool} ({path}) is not on PATH here; install it, or {fix}")
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60, check=False)
        said = (done.stdout or done.stderr).strip().splitlines()
        lines.append(f"{tool}: {said[-1] if said else 'no version printed'} ({found})")
    return lines
