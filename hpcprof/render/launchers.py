"""Launchers by name (site `launcher.kind`/`flavor`): the argv that starts N ranks.

Each returns a list of tokens; user values are plain strings (quoted at render), hpcprof's own
shell expressions are `Raw`.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from hpcprof.config.schedulers import dialect
from hpcprof.config.site import SiteConfig
from hpcprof.core.errors import UserError
from hpcprof.render.quoting import Raw

#: site `binding.cpu_bind` words every launcher knows -> each launcher's own spelling
BIND_WORDS: dict[str, dict[str, str]] = {
    "core": {"pals": "core", "hydra": "core", "openmpi": "core", "srun": "cores"},
    "thread": {"pals": "thread", "hydra": "hwthread", "openmpi": "hwthread", "srun": "threads"},
    "socket": {"pals": "socket", "hydra": "socket", "openmpi": "package", "srun": "sockets"},
    "numa": {"pals": "numa", "hydra": "numa", "openmpi": "numa", "srun": "ldoms"},
    "none": {"pals": "none", "hydra": "none", "openmpi": "none", "srun": "none"},
}
BIND_ALIASES = {"cores": "core", "threads": "thread", "hwthread": "thread", "sockets": "socket",
                "package": "socket", "ldoms": "numa"}
#: launcher-native forms passed through as they are (PALS cpu lists, srun maps and masks)
NATIVE_BIND = {"pals": ("list:", "mask:"), "srun": ("map_cpu:", "mask_cpu:", "map_ldom:", "mask_ldom:")}


def cpu_bind(site: SiteConfig, launcher: str) -> str | None:
    """The site's `binding.cpu_bind` in `launcher`'s words. `depth` (ALCF's: each rank on
    `binding.depth` consecutive cores) becomes PALS `depth`, Hydra `core:DEPTH`, Open MPI `core`
    (with `PE=DEPTH` in --map-by) and srun `cores` (with -c DEPTH)."""
    value = site.binding.cpu_bind
    if value is None:
        return None
    if value == "depth":
        if not site.binding.depth:
            raise UserError(f"site {site.name}: binding.cpu_bind: depth needs binding.depth (cores per rank)")
        return {"pals": "depth", "hydra": f"core:{site.binding.depth}", "openmpi": "core", "srun": "cores"}[launcher]
    word = BIND_ALIASES.get(value, value)
    if word in BIND_WORDS:
        return BIND_WORDS[word][launcher]
    if value.startswith(NATIVE_BIND.get(launcher, ())):
        return value
    native = ", ".join(f"{prefix}..." for prefix in NATIVE_BIND.get(launcher, ()))
    raise UserError(f"site {site.name}: binding.cpu_bind: {value!r} is not a binding the {launcher} launcher "
                    f"takes; use depth, {', '.join(BIND_WORDS)}{', ' + native if native else ''}")


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


def check_local_launcher(site: SiteConfig) -> None:
    """At submit on a local site, where the job starts here at once: the launcher program
    (launcher.command, else its kind) runs here; a missing one, or an mpiexec that says (`--version`)
    it is another flavour than launcher.flavor, is a one-line error naming the field, never a job that
    fails with 127 or 255 after the fact."""
    program = local_program(site)
    flavor = site.launcher.flavor
    if site.launcher.kind == "mpiexec" and flavor != "auto" and (found := mpiexec_flavor(program)) not in (None, flavor):
        raise UserError(f"site {site.name}: launcher.flavor: {flavor}, but {program} is {FLAVOR_NAMES[found]}'s "
                        f"mpiexec, which would refuse the job's options; set launcher.flavor: {found} (or auto) in a "
                        f"site file (--site-file), or launcher.command to {FLAVOR_NAMES[flavor or found]}'s mpiexec")


def local_program(site: SiteConfig) -> str:
    """The local site's launcher program (launcher.command, else its kind) as it runs here; a
    one-line error naming launcher.command where it is not a program here."""
    program = launcher_program(site)
    if shutil.which(program) is None:
        raise UserError(f"site {site.name}: launcher.command: {program} is not a program here; install "
                        f"{site.launcher.kind}, or set launcher.command to its full path")
    return program


def launcher_program(site: SiteConfig) -> str:
    """The site's launcher program as its jobs name it: launcher.command (resolve_command), else its kind."""
    return resolve_command(site.launcher.kind, site.launcher.command)


#: mpiexec flavours -> the implementation `mpiexec --version` names, and the words that name it there
FLAVOR_NAMES = {"hydra": "MPICH (Hydra)", "openmpi": "Open MPI", "pals": "Cray PALS"}
FLAVOR_WORDS = {"hydra": ("HYDRA",), "openmpi": ("Open MPI", "OpenRTE"), "pals": ("PALS",)}


@functools.cache
def mpiexec_flavor(program: str) -> str | None:
    """The flavour `program --version` says it is (FLAVOR_WORDS), None when it says none of them
    (asked once per process)."""
    import subprocess

    try:
        said = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return flavor_named(said.stdout + said.stderr)


def flavor_named(version: str) -> str | None:
    """The one flavour an mpiexec's `--version` text names (FLAVOR_WORDS), else None."""
    found = [flavor for flavor, words in FLAVOR_WORDS.items() if any(w in version for w in words)]
    return found[0] if len(found) == 1 else None


def local_flavor(site: SiteConfig) -> str:
    """`launcher.flavor: auto` (a local site's): the flavour its mpiexec says it is; a one-line error
    naming the field where it names none hpcprof knows."""
    program = local_program(site)
    found = mpiexec_flavor(program)
    if found is None:
        raise UserError(f"site {site.name}: launcher.flavor: auto, but `{program} --version` names none of "
                        f"{', '.join(FLAVOR_NAMES.values())}; set launcher.flavor to hydra, openmpi or pals in a site "
                        "file (--site-file)")
    return found


def mpiexec_pals(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Cray PALS mpiexec (Polaris, Aurora)."""
    cmd = [launcher_program(site), "-n", str(nodes * ppn), "--ppn", str(ppn)]
    if site.binding.depth:
        cmd += [f"--depth={site.binding.depth}"]
    if (bind := cpu_bind(site, "pals")) is not None:
        cmd += ["--cpu-bind", bind]
    return [*cmd, "--env", Raw('TMPDIR="$TMPDIR"'), *site.launcher.extra_args]


def mpiexec_hydra(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """MPICH Hydra mpiexec (the mpich wheel; finds hosts from Slurm/PBS itself)."""
    cmd = [launcher_program(site), "-n", str(nodes * ppn), "-ppn", str(ppn)]
    if (bind := cpu_bind(site, "hydra")) is not None:
        cmd += ["-bind-to", bind]
    return [*cmd, "-genv", "TMPDIR", Raw('"$TMPDIR"'), *site.launcher.extra_args]


def mpiexec_openmpi(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Open MPI mpiexec."""
    mapping = f"ppr:{ppn}:node" + (f":PE={site.binding.depth}" if site.binding.depth else "")
    cmd = [launcher_program(site), "-n", str(nodes * ppn), "--map-by", mapping]
    if (bind := cpu_bind(site, "openmpi")) is not None:
        cmd += ["--bind-to", bind]
    return [*cmd, "-x", "TMPDIR", *site.launcher.extra_args]


def srun(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """Slurm srun with the site's --mpi plugin and binding; a rank that fails ends the step
    (--kill-on-bad-exit), so the others do not wait for it until the walltime."""
    cmd = [launcher_program(site), "-N", str(nodes), "-n", str(nodes * ppn),
           "--ntasks-per-node", str(ppn), "--kill-on-bad-exit=1"]
    if site.launcher.mpi:
        cmd.append(f"--mpi={site.launcher.mpi}")
    if site.binding.depth:
        cmd += ["-c", str(site.binding.depth)]
    if site.binding.cpu_bind:
        cmd.append(f"--cpu-bind={cpu_bind(site, 'srun')}")
    return [*cmd, *site.launcher.extra_args]


def torchrun(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """torchrun, one agent per node (started by srun or PALS mpiexec on more than one node)."""
    run = [launcher_program(site), f"--nnodes={nodes}", f"--nproc-per-node={ppn}"]
    if nodes == 1:
        return [*run, "--standalone", "--no-python", *site.launcher.extra_args]
    rdzv = ["--rdzv-backend=c10d", Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'), "--no-python"]
    kind = dialect(site.scheduler)
    if kind == "slurm":
        prefix = ["srun", "-N", str(nodes), "-n", str(nodes), "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    elif kind == "pbs":  # PBS Pro, Torque
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


#: launchers the job starts with SIGPIPE ignored. MPICH's Hydra mpiexec (5.0.2, the PyPI wheel) was
#: killed now and then by the SIGPIPE of its own write to a pipe or socket whose reader had gone, at
#: the end of a job whose ranks write through the wrapper's tee: the job exited 141, with no message,
#: instead of the ranks' status (benchmarks/hydra_sigpipe.py, 4 ranks whose rank 1 exits 3 on a loaded
#: 2-core machine: 22 and 43 of 1,500 jobs; none of 3,000 with SIGPIPE ignored). Hydra starts its
#: proxies, and they the ranks, with SIGPIPE's default action (/proc/PID/status SigIgn), as before.
SIGPIPE_IGNORED = frozenset({"mpiexec:hydra"})


def launcher_key(site: SiteConfig) -> str:
    """The site's launcher as LAUNCHERS names it: `kind`, or `kind:flavor` (`auto`: local_flavor)."""
    flavor = local_flavor(site) if site.launcher.flavor == "auto" else site.launcher.flavor
    return f"{site.launcher.kind}:{flavor}" if flavor else site.launcher.kind


def launch_argv(site: SiteConfig, nodes: int, ppn: int) -> list[str]:
    """The launcher tokens for `nodes` x `ppn` ranks, up to (not including) the wrapper."""
    return LAUNCHERS[launcher_key(site)](site, nodes, ppn)
