"""Shell injection: metacharacters in every string field of the experiment and site configs are
either rejected (one-line UserError naming the field) or rendered so that running the scripts
never executes them.

Each payload carries commands that would create a file named PWNED* (`$(...)`, backticks, `;`,
`&&`, `|`, quotes, newlines, `${IFS}`, globs, redirections). A config that validates is rendered
for three sites (local, PBS and Slurm templates, all launching with the local Hydra mpiexec),
every script passes `bash -n`, and every script that contains the payload is RUN (the PBS and
Slurm bodies under a PBS-like / Slurm-like environment); afterwards no PWNED* file may exist.

Not covered, by design: the site's `setup` lines are raw shell (module load, conda activate)
written by whoever maintains the site file, and go into the job script unquoted.
"""

from __future__ import annotations

import copy
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcprof.config.experiment import expand
from hpcprof.config.site import SiteConfig
from hpcprof.core.errors import UserError
from hpcprof.core.models import validate
from hpcprof.render.job import render_point, template_dirs, write_run

FAKE_TOOL = r"""#!/bin/bash
# Test double for nsys/ncu: the report goes to the last -o (hpcprof's own); run the app.
args=("$@")
o=0
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = -o ] && o=$i; done
touch "${args[o+1]}.$(basename "$0")-rep"
exec "${args[@]:o+2}"
"""
FRAGMENTS = ["$(touch PWNED1)", "`touch PWNED2`", ";touch PWNED3;", " && touch PWNED4", "|touch PWNED5",
             "'", '"', "\ntouch PWNED6\n", "${IFS}touch${IFS}PWNED7", "*", "?", "[a-z]", "\\", "$HOME",
             "~", "#", " ", "-o", "=", "%q{PMI_RANK}", "\t", "{a,b}", "!!", "<(touch PWNED8)", ">PWNED9",
             "\r", "$((1+1))", "%s"]
KITCHEN_SINK = "".join(FRAGMENTS)
#: Three sites, one per job template; all launch with this machine's Hydra mpiexec.
BASE_SITE: dict[str, Any] = {
    "launcher": {"kind": "mpiexec", "flavor": "hydra", "command": "auto"},
    "node": {"cores": 8, "ranks_per_node": 1}, "paths": {"python": "auto"},
    "defaults": {"walltime": "00:05:00"}, "env": {"HP_SITE_VAR": "site"},
}
SITES: dict[str, dict[str, Any]] = {
    "local": {**BASE_SITE, "name": "inj-local", "scheduler": "local"},
    "pbs": {**BASE_SITE, "name": "inj-pbs", "scheduler": "pbs", "pbs_select": "system=polaris",
            "pbs_options": ["-r y"], "defaults": {"walltime": "00:05:00", "queue": "debug",
                                                  "account": "proj", "filesystems": "home:eagle"}},
    "slurm": {**BASE_SITE, "name": "inj-slurm", "scheduler": "slurm", "sbatch_options": ["--gpu-bind=none"],
              "defaults": {"walltime": "00:05:00", "partition": "debug", "constraint": "gpu",
                           "queue": "regular", "account": "m1_g"}},
}
EXPERIMENT: dict[str, Any] = {
    "name": "inj",
    "workload": {"kind": "command", "argv": ["printf", "%s\\n", "x"]},
    "resources": {"nodes": 1, "ranks_per_node": 1},
    "profile": {"tool": "nsys", "ranks": "all"},
    "env": {"HP_EXP_VAR": "exp"},
}
#: (config, dotted path, how the payload goes in, what the error must name).
#: how: value (the field is the payload), item (a list [payload]), argv (the program's argument),
#: key / value of a mapping entry, sweep-key / sweep-value.
FIELDS: list[tuple[str, str, str, str]] = [
    *[("exp", path, "value", path) for path in (
        "name", "workload.kind", "resources.walltime", "resources.queue", "resources.partition",
        "resources.account", "resources.filesystems", "resources.constraint", "profile.tool",
        "profile.ranks", "profile.nsys.capture_range", "profile.nsys.nvtx_capture",
        "profile.nsys.capture_range_end", "profile.nsys.sample", "profile.nsys.cpuctxsw",
        "profile.nsys.cuda_graph_trace", "profile.nsys.mpi_impl", "profile.ncu.set",
        "profile.ncu.kernel_name", "profile.ncu.kernel_name_base", "profile.ncu.replay_mode",
        "profile.ncu.target_processes")],
    *[("exp", path, "item", path) for path in (
        "profile.nsys.trace", "profile.nsys.extra_args", "profile.ncu.sections", "profile.ncu.metrics",
        "profile.ncu.nvtx_include", "profile.ncu.extra_args")],
    ("exp", "workload.argv", "argv", "workload.argv"),
    ("exp", "workload.args", "key", "workload"),
    ("exp", "env", "key", "env"),
    ("exp", "env", "value", "env"),
    ("exp", "sweep", "sweep-key", "sweep"),
    ("exp", "sweep", "sweep-value", "workload.argv"),
    *[("site", path, "value", path) for path in (
        "name", "description", "scheduler", "launcher.kind", "launcher.flavor", "launcher.command",
        "defaults.queue", "defaults.partition", "defaults.account", "defaults.filesystems",
        "defaults.constraint", "defaults.walltime", "defaults.max_walltime", "binding.cpu_bind",
        "gpu_affinity", "paths.python", "paths.nsys", "paths.ncu", "templates", "pbs_select")],
    *[("site", path, "item", path) for path in ("launcher.extra_args", "sbatch_options", "pbs_options")],
    ("site", "env", "key", "env"),
    ("site", "env", "value", "env"),
]


def put(data: dict[str, Any], path: str, how: str, payload: str) -> None:
    """Put `payload` into `data` at `path` the way `how` says."""
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    if how == "value" and last == "env":
        node[last] = {"HP_INJECTED": payload}
    elif how == "value":
        node[last] = payload
    elif how == "item":
        node[last] = [payload]
    elif how == "argv":
        node[last] = ["printf", "%s\\n", payload]
    elif how == "key":
        node[last] = {payload: "1"}
    elif how == "sweep-key":
        node[last] = {payload: [1]}
    else:
        node[last] = {"workload.argv": [["printf", "%s\\n", payload]]}


def configs(target: str, path: str, how: str, payload: str, tools: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The experiment and the three sites with the payload in place."""
    exp = copy.deepcopy(EXPERIMENT)
    if path.startswith(("profile.ncu", "paths.ncu")):
        exp["profile"]["tool"] = "ncu"
    if path == "paths.python":  # only built-in workloads run the site's Python
        exp["workload"] = {"kind": "seqpar", "args": {}}
    if path.startswith(("profile.nsys.capture_range", "profile.nsys.nvtx_capture")):
        exp["profile"]["window"] = {"opened_by_program": True}   # else a command's capture range is refused for that
    if path == "profile.nsys.nvtx_capture":
        exp["profile"]["nsys"] = {"capture_range": "nvtx"}
    if path == "profile.nsys.capture_range_end":
        exp["profile"]["nsys"] = {"capture_range": "cudaProfilerApi"}
    sites = copy.deepcopy(SITES)
    for site in sites.values():
        site["paths"] |= {"nsys": str(tools / "nsys"), "ncu": str(tools / "ncu")}
    for data in ([exp] if target == "exp" else sites.values()):
        put(data, path, how, payload)
    return exp, sites


def job_env(kind: str, tmp: Path) -> dict[str, str]:
    """The environment a job script starts in, per scheduler."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "LC_ALL": "C"}
    if kind == "pbs":
        nodefile = tmp / "nodefile"
        nodefile.write_text("localhost\n")
        env |= {"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "1.pbs", "PBS_O_WORKDIR": str(tmp)}
    elif kind == "slurm":
        env |= {"SLURM_JOB_NODELIST": "localhost"}
    return env


def check(target: str, path: str, how: str, needle: str, payload: str, tools: Path) -> int | None:
    """Reject with a one-line error naming the field (None), or render, `bash -n` and run the
    scripts that contain the payload (returns how many ran): no PWNED* file may appear."""
    exp, sites = configs(target, path, how, payload, tools)
    with tempfile.TemporaryDirectory(prefix="hpcprof-inj-") as tmp_name:
        tmp = Path(tmp_name)
        ran = 0
        for kind, site_data in sites.items():
            try:
                site = validate(SiteConfig, site_data, f"site config {kind}")
                points = expand(copy.deepcopy(exp), site, "experiment inj")
                rendered = [render_point(p, site, tmp / kind / f"run{p.index}", f"run{p.index}",
                                         template_dirs(site, None)) for p in points]
            except UserError as exc:
                message = exc.format_message()
                assert "\n" not in message and needle in message, (needle, message)
                return None
            (tmp / kind).mkdir()
            for run in rendered:
                run_dir = write_run(run)
                scripts = [run_dir / "job.sh", run_dir / "rank_wrapper.sh"]
                for script in scripts:
                    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
                    assert syntax.returncode == 0, (script.name, syntax.stderr)
                if any("PWNED" in s.read_text() for s in scripts):
                    subprocess.run(["bash", str(run_dir / "job.sh")], cwd=tmp, env=job_env(kind, tmp),
                                   capture_output=True, timeout=60)
                    assert (run_dir / "DONE").exists()
                    ran += 1
        pwned = [str(p.relative_to(tmp)) for p in tmp.rglob("PWNED*")]
        assert not pwned, f"payload {payload!r} in {target} {path} ran: {pwned}"
        return ran


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bin")
    for name in ("nsys", "ncu"):
        (directory / name).write_text(FAKE_TOOL)
        (directory / name).chmod(0o755)
    return directory


@pytest.mark.parametrize(("target", "path", "how", "needle"), FIELDS,
                         ids=[f"{t}:{p}:{h}" for t, p, h, _ in FIELDS])
def test_kitchen_sink_in_every_field(target: str, path: str, how: str, needle: str, tools: Path) -> None:
    ran = check(target, path, how, needle, KITCHEN_SINK, tools)
    print(f"{target}:{path}:{how} -> {'rejected' if ran is None else f'{ran} job scripts run'}")


def test_a_clean_run_reaches_done(tools: Path) -> None:
    """The harness itself: a harmless value is accepted and all three job scripts run to DONE."""
    assert check("exp", "env", "value", "env", "harmless PWNED0 text", tools) == 3


@pytest.mark.parametrize(("field", "payload"), [
    (("site", "defaults.queue", "value", "defaults.queue"), "a=b"),   # a whole-site check names the field
    (("exp", "resources.queue", "value", "resources.queue"), "a=b"),  # and so does the render's
    (("exp", "profile.nsys.nvtx_capture", "value", "profile.nsys.nvtx_capture"), "step"),
    (("site", "templates", "value", "templates"), "~$(touch PWNED1)")])
def test_payloads_hypothesis_found(field: tuple[str, str, str, str], payload: str, tools: Path) -> None:
    """Cases test_random_payloads found: a '=' in a PBS queue refused naming 'defaults.queue' (was
    '(top level)') and 'resources.queue' (was 'queue'); an NVTX capture range the field takes is
    not refused for another field's sake (the harness now says the command opens its range); a
    site's `templates: ~$(touch PWNED1)` (~USER of no user here) refused naming the field, where
    pathlib's expanduser raised RuntimeError."""
    check(*field, payload, tools)


payloads = st.lists(st.one_of(st.sampled_from(FRAGMENTS),
                              st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                      max_size=3)),
                    min_size=1, max_size=5).map("".join)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(FIELDS), payload=payloads)
def test_random_payloads(field: tuple[str, str, str, str], payload: str, tools: Path) -> None:
    check(*field, payload, tools)
