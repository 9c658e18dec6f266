"""The rendered rank wrapper, run by bash: rank resolution under each launcher's environment,
which ranks each selection policy profiles, the report path, and agreement with
`RankSelection.selects`. Plus a real `mpiexec -n 4` job with the local site.

The only double is the profiler binary (no GPU here): a script named nsys/ncu, set through the
site's `paths`, that records its argv next to the report `-o` names, creates the report file
and then runs the application, as the real tools do.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcprof.cli import main
from hpcprof.config.experiment import RANK_ENV, Experiment, Point, expand
from hpcprof.config.site import SiteConfig, find_site
from hpcprof.core.models import dump, validate
from hpcprof.render.job import render_point, template_dirs, write_run
from hpcprof.run.ranks import RankSelection

FAKE_TOOL = r"""#!/bin/bash
# Test double for nsys/ncu: record argv beside the -o report, create the report, run the app.
args=("$@")
while [ $# -gt 0 ] && [ "$1" != -o ]; do shift; done
out=$2
shift 2
printf '%s\n' "$(basename "$0")" "${args[@]}" > "$out.argv"
touch "$out.$(basename "$0")-rep"
exec "$@"
"""
APP = r"""#!/bin/bash
echo "app rank=$HPCPROF_RANK local=$HPCPROF_LOCAL_RANK tool=$HPCPROF_PROFILE_TOOL"
printf '%s %s %s %s\n' "$HPCPROF_RANK" "$HPCPROF_LOCAL_RANK" "$HPCPROF_PROFILE_TOOL" \
  "${HPCPROF_TORCH_SCHEDULE:-}" > "$HPCPROF_RUN_DIR/results/app.$HPCPROF_RANK"
"""
#: Launcher -> environment of global rank r, local rank l (reference/hpc_submission.md §4.4).
LAUNCHERS: dict[str, Any] = {
    "pals": lambda r, l: {"PALS_RANKID": r, "PALS_LOCAL_RANKID": l, "PMI_RANK": r, "PMI_LOCAL_RANK": l,
                          "PMIX_RANK": r},
    "hydra": lambda r, l: {"PMI_RANK": r, "MPI_LOCALRANKID": l, "PMI_SIZE": 12},
    "openmpi": lambda r, l: {"OMPI_COMM_WORLD_RANK": r, "OMPI_COMM_WORLD_LOCAL_RANK": l, "PMIX_RANK": r},
    "srun-pmi2": lambda r, l: {"SLURM_PROCID": r, "SLURM_LOCALID": l, "PMI_RANK": r},
    "srun-pmix": lambda r, l: {"SLURM_PROCID": r, "SLURM_LOCALID": l, "PMIX_RANK": r},
    "mpiexec-in-slurm": lambda r, l: {"PMI_RANK": r, "MPI_LOCALRANKID": l, "SLURM_PROCID": 0,
                                      "SLURM_LOCALID": 0},
    "torchrun": lambda r, l: {"RANK": r, "LOCAL_RANK": l, "WORLD_SIZE": 12},
}


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the fake nsys and ncu and the application script."""
    directory = tmp_path_factory.mktemp("bin")
    for name, text in (("nsys", FAKE_TOOL), ("ncu", FAKE_TOOL), ("app.sh", APP)):
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return directory


def site_with_tools(tools: Path, **changes: Any) -> SiteConfig:
    """The local site with the fake profilers in its paths."""
    data = dump(find_site("local"))
    data["paths"] |= {"nsys": str(tools / "nsys"), "ncu": str(tools / "ncu")}
    return validate(SiteConfig, data | changes, "test site")


def make_run(site: SiteConfig, run_dir: Path, profile: dict[str, Any], nodes: int = 3,
             ranks_per_node: int = 4, argv: list[str] | None = None) -> Path:
    """Render and write one run; the point is built directly so that any selection renders."""
    experiment = validate(Experiment, {
        "name": "wrap", "workload": {"kind": "command", "argv": argv or ["true"]},
        "resources": {"nodes": nodes, "ranks_per_node": ranks_per_node}, "profile": profile}, "test experiment")
    point = Point(index=0, params={}, experiment=experiment, ranks_per_node=ranks_per_node,
                  walltime="00:10:00")
    return write_run(render_point(point, site, run_dir, run_dir.name, template_dirs(site, None)))


def clean_env() -> dict[str, str]:
    """The test's environment without any launcher's rank variables (pytest may run in a job)."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LC_ALL": "C"}


def run_ranks(run_dir: Path, app: Path, envs: list[dict[str, Any]]) -> None:
    """Run the wrapper once per environment, one after the other, in one bash process."""
    wrapper = shlex.quote(str(run_dir / "rank_wrapper.sh"))
    lines = [" ".join(["env", *(f"{k}={v}" for k, v in env.items()), "bash", wrapper, "bash",
                       shlex.quote(str(app))]) for env in envs]
    result = subprocess.run(["bash", "-c", "\n".join(lines)], env=clean_env(), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def app_results(run_dir: Path) -> dict[int, list[str]]:
    """rank -> [rank, local rank, tool, torch schedule] as the application saw them."""
    return {int(p.suffix[1:]): p.read_text().rstrip("\n").split(" ")
            for p in (run_dir / "results").glob("app.*")}


def profiled(run_dir: Path, tool: str = "nsys") -> set[int]:
    """Ranks whose report the (fake) profiler created."""
    return {int(p.name.removeprefix("rank").split(".")[0])
            for p in (run_dir / "profiles" / tool).glob(f"rank*.{tool}-rep")}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_rank_resolution_per_launcher(launcher: str, tools: Path, tmp_path: Path) -> None:
    """Under each launcher every rank resolves its own global and local rank; the ALCF policy
    (local rank 0 on the first 2 nodes) profiles ranks 0 and 4 of 3 nodes x 4."""
    run_dir = make_run(site_with_tools(tools), tmp_path / "run",
                       {"tool": "nsys", "ranks": "local:0+first-nodes:2"})
    run_ranks(run_dir, tools / "app.sh", [LAUNCHERS[launcher](r, r % 4) for r in range(12)])
    results = app_results(run_dir)
    assert {r: v[:2] for r, v in results.items()} == {r: [str(r), str(r % 4)] for r in range(12)}
    assert {r for r, v in results.items() if v[2] == "nsys"} == {0, 4}
    assert profiled(run_dir) == {0, 4}
    for rank in range(12):
        log = (run_dir / "logs" / f"rank{rank}.log").read_text()
        assert f"app rank={rank} local={rank % 4}" in log


def test_torchrun_workers_under_srun(tools: Path, tmp_path: Path) -> None:
    """torchrun's workers inherit the srun task's SLURM_PROCID/PMI_RANK (the node's agent);
    with a torchrun site the wrapper trusts RANK/LOCAL_RANK first."""
    site = site_with_tools(tools, scheduler="slurm", launcher={"kind": "torchrun"})
    run_dir = make_run(site, tmp_path / "run", {"tool": "nsys", "ranks": "every:3"}, nodes=2)
    envs = [{"RANK": r, "LOCAL_RANK": r % 4, "SLURM_PROCID": r // 4, "SLURM_LOCALID": 0,
             "PMI_RANK": r // 4} for r in range(8)]
    run_ranks(run_dir, tools / "app.sh", envs)
    assert {r: v[:2] for r, v in app_results(run_dir).items()} == {r: [str(r), str(r % 4)] for r in range(8)}
    assert profiled(run_dir) == {0, 3, 6}


@pytest.mark.parametrize(("ranks", "expected"), [
    ("all", set(range(12))),
    ([1, 6], {1, 6}),
    (5, {5}),
    ("0,5,11", {0, 5, 11}),
    ("local:1", {1, 5, 9}),
    ("first-nodes:1", {0, 1, 2, 3}),
    ("every:5", {0, 5, 10}),
    ("local:0+first-nodes:2", {0, 4}),
    ("every:2+local:2", {2, 6, 10}),
    ("1,2,3,9+every:3", {3, 9}),
    ("first-nodes:2+local:3+every:7", {7}),
])
def test_policies(ranks: Any, expected: set[int], tools: Path, tmp_path: Path) -> None:
    """Each policy (and combination) profiles exactly the expected ranks of 3 nodes x 4, with
    the report named by the rank the wrapper resolved."""
    run_dir = make_run(site_with_tools(tools), tmp_path / "run", {"tool": "nsys", "ranks": ranks})
    run_ranks(run_dir, tools / "app.sh", [LAUNCHERS["hydra"](r, r % 4) for r in range(12)])
    assert profiled(run_dir) == expected
    assert {r for r, v in app_results(run_dir).items() if v[2] == "nsys"} == expected
    for rank in expected:
        argv = (run_dir / "profiles" / "nsys" / f"rank{rank}.argv").read_text().splitlines()
        assert argv[:2] == ["nsys", "profile"]
        assert argv[argv.index("-o") + 1] == str(run_dir / "profiles" / "nsys" / f"rank{rank}")
    assert RankSelection(ranks).selects(0, 0, 4) == (0 in expected)


def test_ncu_options_reach_the_tool(tools: Path, tmp_path: Path) -> None:
    profile = {"tool": "ncu", "ranks": [2], "ncu": {
        "set": "roofline", "kernel_name": "regex:.*gemm.*", "launch_skip": 10, "launch_count": 2,
        "nvtx_include": ["step/"], "profile_from_start": False}}
    run_dir = make_run(site_with_tools(tools), tmp_path / "run", profile, nodes=1)
    run_ranks(run_dir, tools / "app.sh", [LAUNCHERS["pals"](r, r) for r in range(4)])
    assert profiled(run_dir, "ncu") == {2}
    argv = (run_dir / "profiles" / "ncu" / "rank2.argv").read_text().splitlines()
    assert argv == ["ncu", "--set", "roofline", "--kernel-name", "regex:.*gemm.*", "--launch-skip", "10",
                    "--launch-count", "2", "--nvtx", "--nvtx-include", "step/", "--profile-from-start",
                    "off", "-f", "-o", str(run_dir / "profiles" / "ncu" / "rank2"), "bash",
                    str(tools / "app.sh")]


def test_torch_tool_sets_schedule(tools: Path, tmp_path: Path) -> None:
    profile = {"tool": "torch", "ranks": "local:1", "torch": {"wait": 2, "active": 5}}
    run_dir = make_run(site_with_tools(tools), tmp_path / "run", profile, nodes=1, ranks_per_node=2)
    run_ranks(run_dir, tools / "app.sh", [LAUNCHERS["openmpi"](r, r) for r in range(2)])
    assert app_results(run_dir) == {0: ["0", "0", "none", ""],
                                    1: ["1", "1", "torch", "wait=2,warmup=1,active=5,repeat=1"]}


def test_gpu_affinity_reverse(tools: Path, tmp_path: Path) -> None:
    """Polaris' mapping: local rank r sees GPU 3-r."""
    site = site_with_tools(tools, node={"gpus": 4, "cores": 32, "ranks_per_node": 4},
                           gpu_affinity="reverse")
    run_dir = make_run(site, tmp_path / "run", {"tool": "none"}, nodes=1)
    app = tmp_path / "gpu.sh"
    app.write_text('echo "$CUDA_VISIBLE_DEVICES" > "$HPCPROF_RUN_DIR/results/gpu.$HPCPROF_RANK"\n')
    run_ranks(run_dir, app, [LAUNCHERS["pals"](r, r) for r in range(4)])
    assert {r: (run_dir / "results" / f"gpu.{r}").read_text().strip() for r in range(4)} == {
        0: "3", 1: "2", 2: "1", 3: "0"}


def selection_specs() -> st.SearchStrategy[Any]:
    """Every form a rank selection takes: all, int, list, and '+' combinations in any order."""
    ranks = st.lists(st.integers(0, 40), min_size=1, max_size=5)
    parts = st.fixed_dictionaries({}, optional={
        "list": ranks.map(lambda rs: ",".join(map(str, rs))),
        "local": st.integers(0, 5).map(lambda k: f"local:{k}"),
        "first-nodes": st.integers(1, 6).map(lambda n: f"first-nodes:{n}"),
        "every": st.integers(1, 7).map(lambda n: f"every:{n}"),
    })
    combined = parts.filter(bool).flatmap(lambda d: st.permutations(list(d.values()))).map("+".join)
    return st.one_of(st.just("all"), st.integers(0, 40), ranks, combined)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=selection_specs(), ranks_per_node=st.integers(1, 6),
       pairs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=6))
def test_python_and_bash_agree(spec: Any, ranks_per_node: int, pairs: list[tuple[int, int]],
                               tools: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """For any selection and any (rank, local rank), the wrapper profiles exactly when
    `RankSelection.selects` says so."""
    run_dir = make_run(site_with_tools(tools), tmp_path_factory.mktemp("agree") / "run",
                       {"tool": "nsys", "ranks": spec}, nodes=8, ranks_per_node=ranks_per_node)
    pairs = list(dict(pairs).items())  # one local rank per global rank
    run_ranks(run_dir, tools / "app.sh", [LAUNCHERS["hydra"](r, l) for r, l in pairs])
    selection = RankSelection(spec)
    assert profiled(run_dir) == {r for r, l in pairs if selection.selects(r, l, ranks_per_node)}


def test_mpiexec_job_four_ranks(tools: Path, tmp_path: Path) -> None:
    """The local site's real Hydra mpiexec runs the job script: 4 ranks, every:2 profiled."""
    site = site_with_tools(tools)
    exp = {"name": "wrap", "workload": {"kind": "command", "argv": ["bash", str(tools / "app.sh")]},
           "resources": {"nodes": 1, "ranks_per_node": 4}, "profile": {"tool": "nsys", "ranks": "every:2"}}
    (point,) = expand(exp, site, "test")
    run_dir = write_run(render_point(point, site, tmp_path / "run", "run", template_dirs(site, None)))
    result = subprocess.run(["bash", str(run_dir / "job.sh")], env=clean_env(), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    status = dict(line.split("=", 1) for line in (run_dir / "status").read_text().splitlines())
    assert status["exit_code"] == "0" and (run_dir / "DONE").exists()
    results = app_results(run_dir)
    assert {r: v[:3] for r, v in results.items()} == {
        0: ["0", "0", "nsys"], 1: ["1", "1", "none"], 2: ["2", "2", "nsys"], 3: ["3", "3", "none"]}
    assert profiled(run_dir) == {0, 2}
    for rank in range(4):
        assert f"app rank={rank} local={rank}" in (run_dir / "logs" / f"rank{rank}.log").read_text()
    assert "runs under nsys" in (run_dir / "logs" / "rank2.log").read_text()


def test_no_rank_variable_fails(tools: Path, tmp_path: Path) -> None:
    """Started without any launcher's rank variable the wrapper stops with one stderr line and a
    non-zero status instead of every rank becoming rank 0; nothing runs, no log is written."""
    run_dir = make_run(site_with_tools(tools), tmp_path / "run", {"tool": "nsys", "ranks": "all"})
    result = subprocess.run(["bash", str(run_dir / "rank_wrapper.sh"), "bash", str(tools / "app.sh")],
                            env=clean_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcprof: no rank variable set (tried PALS_RANKID")
    assert not list((run_dir / "results").glob("app.*"))
    assert not list((run_dir / "logs").glob("rank*.log"))
    assert not (run_dir / "profiles").exists() or not any((run_dir / "profiles").rglob("*"))


def test_wrapper_reads_only_guarded_rank_variables() -> None:
    """Every variable the wrapper resolves ranks from is one `env` may not set."""
    text = (Path(__file__).parents[1] / "templates" / "rank_wrapper.sh.j2").read_text()
    read = {name for line in text.splitlines() if "$(hp_first " in line
            for name in line.split("$(hp_first ")[1].split(")")[0].split()}
    assert read and read <= RANK_ENV


@pytest.mark.parametrize("name", ["OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "LOCAL_RANK", "HPCPROF_RANK"])
def test_env_cannot_override_rank(name: str, tmp_path: Path) -> None:
    """`env: {OMPI_COMM_WORLD_RANK: "0"}` would make every rank rank 0: rejected at validation,
    exit 2, one line naming the field and the variable, nothing written."""
    experiment = {"name": "e", "workload": {"kind": "command", "argv": ["true"]}, "env": {name: "0"}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    result = CliRunner().invoke(main, ["submit", str(tmp_path / "exp.yaml"), "--workdir",
                                       str(tmp_path / "runs")],
                                env={"HPCPROF_WORKDIR": str(tmp_path / "runs"), "HPCPROF_SITE_PATH": ""})
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "'env'" in lines[0] and f"rank variable {name}" in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()
