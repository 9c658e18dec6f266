"""Every experiment the docs show (README.md, docs/) and every shipped example validates and renders
on every shipped site (with an account where the site requires one), and Polaris refuses a job
without one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.campaign.submit import plan
from hpcprof.config.site import SiteConfig, available_sites, find_site
from hpcprof.core.errors import UserError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def docs_experiments() -> list[tuple[str, str]]:
    """(id, text) of every ```yaml block of the docs that is an experiment (has `workload:`)."""
    found = []
    for path in DOCS:
        blocks = re.findall(r"^```yaml\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE)
        found += [(f"{path.relative_to(REPO)}-{i}", text) for i, text in enumerate(blocks)
                  if isinstance(yaml.safe_load(text), dict) and "workload" in yaml.safe_load(text)]
    assert found, "the docs show no experiment"
    return found


def account_overrides(site: SiteConfig) -> list[str]:
    """What a user of `site` adds: an account where the site requires one (a GPU one on Perlmutter)."""
    if site.gpu_account_suffix:
        return [f"resources.account=m1234{site.gpu_account_suffix}"]
    return ["resources.account=PROJECT"] if site.require_account else []


def render_everywhere(experiment: Path, site_name: str, workdir: Path) -> None:
    site = find_site(site_name)
    planned = plan(experiment, site, account_overrides(site), workdir)
    assert planned.runs and all("rank_wrapper.sh" in r.files["job.sh"] for r in planned.runs)
    assert not any(workdir.iterdir()), "planning must not write"


@pytest.mark.parametrize("site_name", sorted(available_sites()))
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_renders(example: Path, site_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    render_everywhere(example, site_name, tmp_path)


@pytest.mark.parametrize("site_name", sorted(available_sites()))
@pytest.mark.parametrize("block", docs_experiments(), ids=lambda b: b[0])
def test_docs_experiment_renders(block: tuple[str, str], site_name: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(block[1])
    workdir = tmp_path / "runs"
    workdir.mkdir()
    render_everywhere(experiment, site_name, workdir)


def test_polaris_refuses_no_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(UserError, match=r"field 'resources.account': site polaris requires an account"):
        plan(REPO / "examples/seqpar_polaris.yaml", find_site("polaris"), [], tmp_path)


def test_examples_carry_no_real_project() -> None:
    texts = [p.read_text() for p in EXAMPLES] + [p.read_text() for p in DOCS]
    assert not any("datascience" in text for text in texts), "ALCF's own project in an example"


def test_zipped_sweep_moves_keys_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    planned = plan(REPO / "examples/ddp_slowdown.yaml", find_site("local"), [], tmp_path)
    pairs = [(r.point.ranks_per_node, r.point.workload_args.world_size) for r in planned.runs]
    assert pairs == [(1, 1), (2, 2)]
    assert [r.run_id[-4:] for r in planned.runs] == ["p000", "p001"]


def test_world_size_must_match_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(UserError, match=r"workload\.args\.world_size': 3 but the resources give 2 ranks"):
        plan(REPO / "examples/ddp_slowdown.yaml", find_site("local"),
             ["sweep={}", "resources.ranks_per_node=2", "workload.args.world_size=3"], tmp_path)



def test_echos_world_size_must_match_resources_at_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Echo folder's local_config.json asks for 2 ranks: one rank is refused when planned, not
    when the run starts; the experiment's own world_size overrides Echo's."""
    monkeypatch.chdir(REPO)
    exp = tmp_path / "ddp.yaml"
    exp.write_text("name: echo\nworkload: {kind: ddp, args: {echo_input: examples/echo_gpt2}}\n"
                   "resources: {nodes: 1, ranks_per_node: 1}\n")
    with pytest.raises(UserError, match=r"field 'world_size of examples/echo_gpt2/local_config.json': 2 but the "
                                        r"resources give 1 ranks .*workload.args.world_size overrides Echo's"):
        plan(exp, find_site("local"), [], tmp_path)
    [run] = plan(exp, find_site("local"), ["workload.args.world_size=1"], tmp_path).runs
    assert run.point.workload_args.world_size == 1


def quickstart_commands() -> list[list[str]]:
    """The `hpcprof ...` command lines of examples/quickstart.sh (continuations joined), as argv."""
    import shlex

    text = (REPO / "examples" / "quickstart.sh").read_text().replace("\\\n", " ")
    body = text[:text.index("cat <<EOF")]
    return [shlex.split(line.split(" #")[0])[1:] for line in body.splitlines() if line.startswith("hpcprof ")]


@pytest.mark.slow
def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The quickstart's hpcprof commands (its venv set-up aside) end with the answer: the sweep's
    two points compared and the HTML report written."""
    import os

    commands = quickstart_commands()
    assert [c[0] for c in commands] == ["submit", "collect", "compare", "report"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HPCPROF_WORKDIR": str(tmp_path / "runs")}
    outputs = []
    for argv in commands:
        argv = [str(REPO / a) if a.startswith("examples/") else a for a in argv]
        done = hpcprof(*argv, cwd=tmp_path, env=env, timeout=600)
        assert done.returncode == 0, f"hpcprof {' '.join(argv)}: {done.stderr}"
        outputs.append(done.stdout)
    compare = outputs[2]
    assert "workload.args.hidden_dim" in compare and "iteration.mean" in compare
    assert (tmp_path / "hpcprof-report.html").stat().st_size > 10_000


@pytest.mark.slow     # a real 2-rank run under torch.profiler, collected and reported
def test_quickstarts_torch_profiler_step_works_on_a_cpu_machine(tmp_path: Path) -> None:
    """The quickstart's suggested torch.profiler step runs as written on this CPU machine: it suggested
    `hpcprof trace temporal`, which needs GPU kernels and failed asking about CUDA; HTA's analyses are
    now suggested for a GPU run only."""
    import os
    import shlex

    text = (REPO / "examples" / "quickstart.sh").read_text()
    hints = text[text.index("To go on"):].splitlines()
    (step,) = [line.split(" #")[0] for line in hints if "profile.tool=torch" in line]
    assert all("GPU run" in line for line in hints if "hpcprof trace " in line)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HPCPROF_WORKDIR": str(tmp_path / "runs")}
    for command in step.split("&&"):
        argv = [str(REPO / a) if a.startswith("examples/") else a for a in shlex.split(command)[1:]]
        done = hpcprof(*argv, cwd=tmp_path, env=env, timeout=600)
        assert done.returncode == 0, f"hpcprof {' '.join(argv)}: {done.stderr}"
    assert "COMPLETED" in done.stdout and "iteration.mean" in done.stdout      # the report of the traced run
    traces = sorted(p.name for p in (tmp_path / "runs").glob("*/*/profiles/torch/*"))
    assert traces == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    # the profiler's start-up and trace writing are not the program's (they made rank 1 a 72 %
    # straggler): the iterations torch.profiler worked in are left out, and the ones it recorded in,
    # against those it did not touch, state its slowdown
    import json
    import statistics

    from hpcprof.run.results import read_headline
    from hpcprof.workloads.args import DEFAULT_TORCH_SCHEDULE, parse_schedule
    from hpcprof.workloads.timing import profiler_iterations

    [run] = (tmp_path / "runs").glob("*/*/results/seqpar.json")
    rows = [r for r in json.loads(run.read_text())["iterations"] if r["phase"] == "iteration"]
    touched, recorded = profiler_iterations(parse_schedule(DEFAULT_TORCH_SCHEDULE), 8)
    assert (touched, recorded) == ({1, 2, 3, 4, 5}, {2, 3, 4})
    assert {r["iteration"] for r in rows if r["window"]} == touched
    assert {r["iteration"] for r in rows if r["profiled"]} == recorded
    headline = {n: v for n, v, _ in read_headline(run.parents[1]).metrics}
    assert headline["iteration.median"] == pytest.approx(statistics.median(r["time_ms"] for r in rows if not r["window"]))
    # the profiler starts before the warm-up, which its start-up's cost (tens of steps) lands in: the first
    # timed iteration, counted, is a steady one
    assert max(r["time_ms"] for r in rows if r["iteration"] == 0) < 10 * headline["iteration.median"]
    slowdown = max(100 * (statistics.median(r["time_ms"] for r in rows if r["rank"] == rank and r["profiled"])
                          / statistics.median(r["time_ms"] for r in rows if r["rank"] == rank and not r["window"]) - 1)
                   for rank in (0, 1))
    assert headline["profiler.slowdown_pct"] == pytest.approx(slowdown)
    assert "in the same processes' steps outside the profiler's" in " ".join(done.stdout.split())
