"""The profilers that are programs on a site's nodes (nsys, ncu; torch.profiler runs inside the
workload): where the site says they are (`hpcprof doctor` probes those after the site's setup),
and the check at submit on a local site (elsewhere the job-start checks of the rendered script do
it on the compute node)."""

from __future__ import annotations

import shutil
import subprocess

from hpcprof.config.site import SiteConfig
from hpcprof.errors import UserError

#: the profilers the rank wrapper starts as programs, in the order they are reported
PROFILER_PROGRAMS = ("nsys", "ncu")


def profiler_paths(site: SiteConfig) -> dict[str, str]:
    """Each profiler program -> the site's `paths.<tool>` (a name on PATH or a full path)."""
    return {tool: getattr(site.paths, tool) for tool in PROFILER_PROGRAMS}


def check_local_profilers(site: SiteConfig, tools: set[str]) -> list[str]:
    """At submit on a local site: each requested profiler (nsys/ncu) is on PATH here; its version
    lines. A missing one is a one-line error naming paths.<tool> (never a 127 after the fact)."""
    lines = []
    for tool, path in profiler_paths(site).items():
        if tool not in tools:
            continue
        found = shutil.which(path)
        if found is None:
            raise UserError(f"profile.tool: {tool} ({path}) is not on PATH here; install it, or set paths.{tool} "
                            f"of site {site.name} to its full path")
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60, check=False)
        said = (done.stdout or done.stderr).strip().splitlines()
        lines.append(f"{tool}: {said[-1] if said else 'no version printed'} ({found})")
    return lines
