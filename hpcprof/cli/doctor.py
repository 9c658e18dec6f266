"""`hpcprof doctor --site S`: the job-start checks of a site, run here (a login node), and what
they found: the site's setup lines (modules), its launcher (mpiexec's flavour), its Python, hpcprof,
torch/CUDA/NCCL versions, nsys and ncu, the NCCL network plugin, the account and whether the workdir
is writable.

The probes run in one bash process that first runs the site's `setup:` lines and exports its
`env:`, as the job does; each probe prints one `@@name value` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from hpcprof.cli.options import site_file_option, site_option
from hpcprof.config.site import SiteConfig, expand_workdir, find_site
from hpcprof.core.errors import UserError, expand_home
from hpcprof.render.launchers import FLAVOR_NAMES, flavor_named, launcher_program
from hpcprof.render.profilers import profiler_paths
from hpcprof.render.quoting import quote

#: how the probe names a torch built without CUDA
CPU_BUILD = "none (CPU build)"
#: what the site's Python reports about itself (one JSON line; every import failure is text)
PYTHON_PROBE = f"CPU_BUILD = {CPU_BUILD!r}" + r"""
import json, sys
found = {"python": f"{sys.version.split()[0]} ({sys.executable})"}
def version(name):
    try:
        module = __import__(name)
        return getattr(module, "__version__", "?")
    except Exception as exc:
        return f"MISSING: {type(exc).__name__}: {exc}"
found["hpcprof"] = version("hpcprof")
if not found["hpcprof"].startswith("MISSING"):
    try:
        import hpcprof.config
    except Exception as exc:
        found["hpcprof"] = f"MISSING: {type(exc).__name__}: {exc}"
found["mpi4py"] = version("mpi4py")
found["torch"] = version("torch")
if not found["torch"].startswith("MISSING"):
    import torch
    found["cuda"] = f"{torch.version.cuda or CPU_BUILD}, {torch.cuda.device_count()} GPU(s) visible"
    try:
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else CPU_BUILD
    except Exception as exc:
        found["nccl"] = f"MISSING: {type(exc).__name__}: {exc}"
print("@@python-json " + json.dumps(found))
"""

#: the NCCL network plugin on LD_LIBRARY_PATH (as the job checks it)
PLUGIN_PROBE = r"""
hp_plugin=""
IFS=: read -r -a hp_dirs <<< "${LD_LIBRARY_PATH:-}"
for hp_dir in "${hp_dirs[@]}"; do
  for hp_lib in "$hp_dir"/libnccl-net*.so; do [ -e "$hp_lib" ] && { hp_plugin=$hp_lib; break 2; }; done
done
echo "@@nccl-net ${NCCL_NET:-}"
echo "@@nccl-plugin $hp_plugin"
"""


@dataclass
class Finding:
    """One line of the doctor's report."""

    check: str
    ok: bool
    found: str
    fix: str = ""
    failed: str = "MISSING"     # the status when not ok


def probe_script(site: SiteConfig) -> str:
    """The bash script that runs the site's setup and env, then every probe."""
    lines = ["exec 2>&1", 'hp_said=$(mktemp)', "trap 'rm -f \"$hp_said\"' EXIT"]
    for index, line in enumerate(site.setup):  # each line's exit status and the last line it printed
        lines += ["{", line, '} > "$hp_said" 2>&1', f'echo "@@setup-{index} $? $(tail -n 1 "$hp_said")"']
    lines += [f"export {name}={quote(value)}" for name, value in site.env.items()]
    lines.append('if type module >/dev/null 2>&1; then echo "@@modules $(module -t list 2>&1 | tr "\\n" " ")"; '
                 'else echo "@@modules"; fi')
    python = sys.executable if site.paths.python == "auto" else site.paths.python
    lines += [f"{quote(python)} -c {quote(PYTHON_PROBE)} || echo \"@@python-failed $?\""]
    said = ' "$("$hp_tool" --version 2>&1 | head -n 5 | tr "\\n" " ")"' if site.launcher.kind == "mpiexec" else ""
    lines.append(f'if hp_tool=$(command -v {quote(launcher_program(site))}); then echo "@@launcher $hp_tool"; '
                 f'echo "@@launcher-version{said}"; else echo "@@launcher"; fi')
    for tool, path in profiler_paths(site).items():
        lines.append(f'if hp_tool=$(command -v {quote(path)}); then echo "@@{tool} $("$hp_tool" --version 2>&1 | '
                     f'tail -n 1) ($hp_tool)"; else echo "@@{tool}"; fi')
    lines += [PLUGIN_PROBE]
    return "\n".join(lines) + "\n"


def run_probes(site: SiteConfig, timeout: float = 300) -> dict[str, str]:
    """Run the probe script: its `@@name value` lines."""
    try:
        done = subprocess.run(["bash", "-c", probe_script(site)], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"doctor: the probes of site {site.name} did not finish in {timeout:.0f} s "
                        "(a setup line waiting for input?)") from None
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith("@@"):
            name, _, value = line[2:].partition(" ")
            found[name] = value.strip()
    return found


def setup_findings(site: SiteConfig, found: dict[str, str]) -> list[Finding]:
    """One finding per setup line (its exit status) and the modules loaded."""
    findings = []
    for index, line in enumerate(site.setup):
        status, _, said = found.get(f"setup-{index}", "not-run").partition(" ")
        ok = status == "0"
        findings.append(Finding(f"setup: {line}", ok, f"exit {status}" + (f": {said}" if said and not ok else ""),
                                "" if ok else "fix or remove this line in the site file (it runs before every job)",
                                "FAILED"))
    if site.setup:
        findings.append(Finding("modules", True, found.get("modules") or "(no module command here)"))
    return findings


def launcher_finding(site: SiteConfig, found: dict[str, str]) -> Finding:
    """The launcher program as the job finds it (after the site's setup) and, for mpiexec, the flavour
    its `--version` names against launcher.flavor (`auto`: a local site's, whatever it names)."""
    path, flavor = found.get("launcher", ""), site.launcher.flavor
    if not path:
        return Finding("launcher", False, f"{launcher_program(site)}: not on PATH",
                       "load its module in the site's setup: or set launcher.command to its full path")
    if site.launcher.kind != "mpiexec":
        return Finding("launcher", True, path)
    named = flavor_named(found.get("launcher-version", ""))
    if named is None:
        return Finding("launcher", flavor != "auto", f"{path}: its --version names none of {', '.join(FLAVOR_NAMES.values())}",
                       "set launcher.flavor to hydra, openmpi or pals in the site file" if flavor == "auto" else "", "FAILED")
    if flavor not in ("auto", named):
        return Finding("launcher", False, f"{path}: {FLAVOR_NAMES[named]}'s mpiexec, where the site says flavor: {flavor}",
                       f"set launcher.flavor: {named} in the site file, or launcher.command to "
                       f"{FLAVOR_NAMES[flavor or named]}'s mpiexec", "FAILED")
    return Finding("launcher", True, f"{path}: {FLAVOR_NAMES[named]}" + (" (flavor: auto)" if flavor == "auto" else ""))


def python_findings(site: SiteConfig, found: dict[str, str]) -> list[Finding]:
    """The site's Python and what it imports."""
    python = site.paths.python
    if "python-json" not in found:
        return [Finding("python", False, f"{python}: cannot run (exit {found.get('python-failed', '?')})",
                        "set paths.python in the site file, or activate a venv in its setup: "
                        f"(hpcprof sites init {site.name} --venv DIR)")]
    info = json.loads(found["python-json"])
    fixes = {"hpcprof": f"pip install hpcprof into the venv the site's setup activates (hpcprof sites init "
                        f"{site.name} --venv DIR; README: Installing on a cluster)",
             "torch": "load the site's PyTorch module in setup: (venv with --system-site-packages on top of it)",
             "mpi4py": "seqpar needs mpi4py: use the site's module (or pip install mpi4py in the venv)"}
    cpu_build = (f"this site's nodes have {site.node.gpus} GPU(s) and this torch is its CPU build: load the "
                 "site's PyTorch module in setup: (or install torch's CUDA build in the venv)")
    findings = [Finding("python", True, info["python"])]
    for name in ("hpcprof", "torch", "cuda", "nccl", "mpi4py"):
        if name in info:
            value = str(info[name])
            if value.startswith("MISSING"):
                findings.append(Finding(name, False, value, fixes.get(name, "")))
            elif name in ("cuda", "nccl") and value.startswith(CPU_BUILD) and site.node.gpus:
                findings.append(Finding(name, False, value, cpu_build))
            else:
                findings.append(Finding(name, True, value))
    return findings


def tool_findings(site: SiteConfig, found: dict[str, str]) -> list[Finding]:
    """The profiler programs (nsys, ncu, ...) and the NCCL network plugin."""
    findings = []
    for tool, path in profiler_paths(site).items():
        value = found.get(tool, "")
        findings.append(Finding(tool, bool(value), value or f"{path}: not on PATH",
                                "" if value else f"load its module in the site's setup: or set paths.{tool} "
                                                 f"(needed only for profile.tool: {tool})"))
    net, plugin = found.get("nccl-net", ""), found.get("nccl-plugin", "")
    if net in ("", "IB", "Socket"):
        findings.append(Finding("NCCL network plugin", True, f"NCCL_NET={net or '(unset)'}: none needed"))
    else:
        findings.append(Finding("NCCL network plugin", bool(plugin), f"NCCL_NET={net}: " + (plugin or "no libnccl-net*.so on LD_LIBRARY_PATH"),
                                "" if plugin else "add the plugin's lib directory to LD_LIBRARY_PATH in the site's "
                                                  "setup: (Polaris: /soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib)"))
    return findings


def writable_ancestor(path: Path) -> tuple[Path, bool]:
    """The nearest existing directory at or above `path` (~ expanded already), and whether this user
    may write there."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def account_findings(site: SiteConfig, account: str | None) -> list[Finding]:
    """The account and the workdir (checked, never created)."""
    findings = []
    if account:
        findings.append(Finding("account", True, account))
    else:
        findings.append(Finding("account", not site.require_account, "none",
                                "give --account here and resources.account (or hpcprof sites init "
                                f"{site.name} --account PROJECT)" if site.require_account else ""))
    try:
        if os.environ.get("HPCPROF_WORKDIR"):
            workdir = Path(os.environ["HPCPROF_WORKDIR"])
        else:
            workdir = expand_workdir(site, account) if site.workdir else Path("hpcprof-runs")
        workdir = expand_home(workdir, "workdir")
    except UserError as exc:
        return [*findings, Finding("workdir", False, site.workdir or "", exc.format_message())]
    ancestor, writable = writable_ancestor(workdir)
    where = "exists" if ancestor == workdir.absolute() else f"would be created under {ancestor}"
    findings.append(Finding("workdir", writable, f"{workdir} ({where}, {'writable' if writable else 'NOT writable'})",
                            "" if writable else "give --workdir DIR (or $HPCPROF_WORKDIR) on a file system you can write"))
    return findings


def diagnose(site: SiteConfig, account: str | None) -> list[Finding]:
    """Every finding for `site`."""
    found = run_probes(site)
    return [*setup_findings(site, found), launcher_finding(site, found), *python_findings(site, found),
            *tool_findings(site, found),
            *account_findings(site, account or site.defaults.account)]


@click.command()
@site_option
@site_file_option
@click.option("--account", default=None, help="The account (project) your jobs will charge.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def doctor(site_name: str, site_file: Path | None, account: str | None, fmt: str) -> None:
    """Run a site's job-start checks here (a login node) and print what they found: setup lines
    (modules), the launcher (mpiexec's flavour), Python, hpcprof, torch/CUDA/NCCL, nsys/ncu, the NCCL
    network plugin, account, workdir.
    Exit status 1 when something is missing."""
    from hpcprof.core.output import emit_rows

    site = find_site(site_name, site_file)
    findings = diagnose(site, account)
    rows = [{"check": f.check, "status": "ok" if f.ok else f.failed,
             "found": f.found, "fix": f.fix} for f in findings]
    emit_rows(rows, ["check", "status", "found", "fix"], fmt)
    if not all(f.ok for f in findings if f.check not in profiler_paths(site)):   # each needed by its tool only
        raise SystemExit(1)
