"""Launchers by name (site `launcher.kind`/`flavor`): the argv that starts N ranks.

Each returns a list of tokens; user values are plain strings (quoted at render), hpcprof's own
shell expressions are `Raw`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

from hpcprof.config.site import SiteConfig
from hpcprof.errors import UserError
from hpcprof.render.quoting import Raw

WRAPPER = Raw('"$RUN_DIR/rank_wrapper.sh"')


def resolve_command(name: str, configured: str | None) -> str:
    """The launcher binary: the site's path; `auto` (local/CI sites): next to this Python (venv),
    else PATH here; unset: the plain name, found on the compute node's PATH (never a path of
    the machine that renders, which would leak e.g. a venv's mpiexec into a Polaris script)."""
    if configured is None:
        return name
    if configured != "auto":
        return configured
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


def mpiexec_pals(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Cray PALS mpiexec (Polaris, Aurora)."""
    cmd = [resolve_command("mpiexec", site.launcher.command), "-n", str(nodes * ppn), "--ppn", str(ppn)]
    if site.binding.depth:
        cmd += [f"--depth={site.binding.depth}"]
    if site.binding.cpu_bind:
        cmd += ["--cpu-bind", site.binding.cpu_bind]
    return [*cmd, "--env", Raw('TMPDIR="$TMPDIR"'), *site.launcher.extra_args]


def mpiexec_hydra(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """MPICH Hydra mpiexec (the mpich wheel; finds hosts from Slurm/PBS itself)."""
    cmd = [resolve_command("mpiexec", site.launcher.command), "-n", str(nodes * ppn), "-ppn", str(ppn)]
    if site.binding.cpu_bind:
        cmd += ["-bind-to", site.binding.cpu_bind]
    return [*cmd, "-genv", "TMPDIR", Raw('"$TMPDIR"'), *site.launcher.extra_args]


def mpiexec_openmpi(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Open MPI mpiexec."""
    mapping = f"ppr:{ppn}:node" + (f":PE={site.binding.depth}" if site.binding.depth else "")
    cmd = [resolve_command("mpiexec", site.launcher.command), "-n", str(nodes * ppn), "--map-by", mapping]
    if site.binding.cpu_bind:
        cmd += ["--bind-to", site.binding.cpu_bind]
    return [*cmd, "-x", "TMPDIR", *site.launcher.extra_args]


def srun(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Slurm srun with the site's --mpi plugin and binding."""
    cmd = [resolve_command("srun", site.launcher.command), "-N", str(nodes), "-n", str(nodes * ppn),
           "--ntasks-per-node", str(ppn)]
    if site.launcher.mpi:
        cmd.append(f"--mpi={site.launcher.mpi}")
    if site.binding.depth:
        cmd += ["-c", str(site.binding.depth)]
    if site.binding.cpu_bind:
        cmd.append(f"--cpu-bind={site.binding.cpu_bind}")
    return [*cmd, *site.launcher.extra_args]


def torchrun(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """torchrun, one agent per node (started by srun or PALS mpiexec on more than one node)."""
    run = [resolve_command("torchrun", site.launcher.command), f"--nnodes={nodes}", f"--nproc-per-node={ppn}"]
    if nodes == 1:
        return [*run, "--standalone", "--no-python", *site.launcher.extra_args]
    rdzv = ["--rdzv-backend=c10d", Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'), "--no-python"]
    if site.scheduler == "slurm":
        prefix = ["srun", "-N", str(nodes), "--ntasks-per-node=1"]
    elif site.scheduler == "pbs":
        prefix = ["mpiexec", "-n", str(nodes), "--ppn", "1"]
    else:
        raise UserError(f"site {site.name}: torchrun on {nodes} nodes needs a batch scheduler; "
                        "use resources.nodes: 1 on a local site")
    return [*prefix, *run, *rdzv, *site.launcher.extra_args]


LAUNCHERS: dict[str, Callable[[SiteConfig, int, int], list[str]]] = {
    "mpiexec:pals": mpiexec_pals,
    "mpiexec:hydra": mpiexec_hydra,
    "mpiexec:openmpi": mpiexec_openmpi,
    "srun": srun,
    "torchrun": torchrun,
}


def launch_argv(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """The launcher tokens for `nodes` x `ppn` ranks, up to (not including) the wrapper."""
    key = f"{site.launcher.kind}:{site.launcher.flavor}" if site.launcher.flavor else site.launcher.kind
    return LAUNCHERS[key](site, nodes, ppn)
