"""`hpcprof render -o DIR` writes run directories a user can submit by hand as they are (bash for
the local site, sbatch on the real one-node Slurm), and `hpcprof templates vars` lists exactly the
variables the renderer passes to the templates."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from slurm_cluster import poll

from hpcprof.cli import main
from hpcprof.config.experiment import expand, load_experiment
from hpcprof.config.site import find_site
from hpcprof.render.job import MANIFEST_VARS, TEMPLATE_FILTERS, TEMPLATE_VARS, template_context

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "command_hello.yaml"
SWEEP = """name: hand
workload: {kind: command, argv: [bash, -c, 'echo "rank $HPCPROF_RANK in $HPCPROF_RUN_DIR"']}
resources: {nodes: 1, ranks_per_node: 2}
sweep: {env.GREETING: [hi, ho]}
"""


def render(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["render", *args])
    return res.exit_code, res.output


def test_a_rendered_local_job_runs_by_hand(tmp_path: Path) -> None:
    out = tmp_path / "job"
    code, text = render(str(HELLO), "--site", "local", "-o", str(out))
    assert code == 0 and f"bash {out}/job.sh" in text
    assert {"job.sh", "rank_wrapper.sh", "config.json", "logs", "results", "profiles", "tmp"} <= {
        p.name for p in out.iterdir()}
    ran = subprocess.run(["bash", str(out / "job.sh")], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (out / "DONE").exists() and "exit_code=0" in (out / "status").read_text()
    for rank in (0, 1):
        assert f"rank {rank} of run job on" in (out / "logs" / f"rank{rank}.log").read_text()


@pytest.mark.slow
def test_a_run_rendered_with_o_and_started_by_hand_is_collected(tmp_path: Path) -> None:
    """No submission record: the job's own status file says it ran (it was NOT_SUBMITTED, and collect
    skipped it as not collected)."""
    from hpcprof.run.results import list_tables

    out = tmp_path / "job"
    code, _ = render(str(REPO / "examples" / "seqpar_cpu.yaml"), "--site", "local", "-o", str(out),
                     "--set", "workload.args.iterations=2")
    assert code == 0
    ran = subprocess.run(["bash", str(out / "job.sh")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    res = CliRunner().invoke(main, ["collect", str(out)])
    assert res.exit_code == 0 and "collected job (COMPLETED)" in res.output, res.output
    assert "workload_seqpar.iterations" in list_tables(out)
    shown = CliRunner().invoke(main, ["report", str(out)])
    assert shown.exit_code == 0 and "COMPLETED" in shown.output and "iteration.mean" in shown.output


@pytest.mark.parametrize("site, env, workdir", [
    ("local", {"HPCPROF_WORKDIR": "{tmp}/mine"}, "{tmp}/mine"),
    ("polaris", {}, "/eagle/PROJECT/hpcprof"),           # the site's workdir: with the account
])
def test_render_prints_the_run_dir_submit_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: str,
                                               env: dict[str, str], workdir: str) -> None:
    """The printed job script's RUN_DIR is under the workdir submit will use (it was ./hpcprof-runs
    whatever $HPCPROF_WORKDIR or the site said); each render and submit makes a new run id."""
    from hpcprof.cli.render_submit import submit_workdir
    from hpcprof.config.site import find_site

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPCPROF_WORKDIR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    overrides = ("resources.account=PROJECT",)
    code, text = render(str(HELLO), "--site", site, "--set", overrides[0])
    assert code == 0
    (run_dir,) = re.findall(r"^RUN_DIR=(\S+)$", text, re.MULTILINE)
    expected = Path(workdir.format(tmp=tmp_path))
    assert submit_workdir(None, find_site(site, None), HELLO, overrides).absolute() == expected
    assert Path(run_dir).parent == expected / "hello"


def test_a_rendered_sweep_has_one_directory_per_point(tmp_path: Path) -> None:
    exp = tmp_path / "sweep.yaml"
    exp.write_text(SWEEP)
    code, _ = render(str(exp), "--site", "local", "-o", str(tmp_path / "out"))
    assert code == 0
    for index, greeting in enumerate(("hi", "ho")):
        point = tmp_path / "out" / f"p{index:03d}"
        assert f"RUN_DIR={point}" in (point / "job.sh").read_text()
        assert json.loads((point / "config.json").read_text())["experiment"]["env"]["GREETING"] == greeting
        ran = subprocess.run(["bash", str(point / "job.sh")], capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0 and f"rank 1 in {point}" in (point / "logs" / "rank1.log").read_text()


@pytest.mark.slurm
def test_a_rendered_slurm_job_is_submitted_with_sbatch_by_hand(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "job"
    code, text = render(str(HELLO), "--site", "slurm-local", "-o", str(out))
    assert code == 0 and f"sbatch {out}/job.sh" in text
    submitted = subprocess.run(["sbatch", "--parsable", str(out / "job.sh")], capture_output=True, text=True,
                               timeout=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    poll(lambda: (out / "DONE").exists(), bool, 120)
    assert "exit_code=0" in (out / "status").read_text()
    assert "rank 1 of run job" in (out / "logs" / "job.out").read_text()


@pytest.mark.parametrize("site", ["local", "polaris", "perlmutter", "slurm-local", "pbs-local"])
def test_templates_vars_lists_exactly_what_the_renderer_passes(site: str, tmp_path: Path) -> None:
    config = find_site(site, None)
    (point,) = expand(load_experiment(HELLO, ["resources.account=PROJECT"] if config.require_account else []),
                      config, "hello")
    context = template_context(point, config, tmp_path / "run", "run")
    assert set(context) == set(TEMPLATE_VARS)
    res = CliRunner().invoke(main, ["templates", "vars"])
    assert res.exit_code == 0
    listed = {line.split()[0] for line in res.output.splitlines() if line.startswith("  ")}
    assert listed == set(TEMPLATE_VARS) | set(MANIFEST_VARS) | set(TEMPLATE_FILTERS)


def test_every_variable_the_shipped_templates_use_is_listed() -> None:
    """Top-level names the shipped templates read (Jinja's own analysis) are all documented."""
    from jinja2 import meta

    from hpcprof.render.job import jinja_env, shipped_template_dir

    env = jinja_env((shipped_template_dir(),))          # the renderer's own environment and filters
    used: set[str] = set()
    for template in (REPO / "templates").glob("*.j2"):
        used |= meta.find_undeclared_variables(env.parse(template.read_text()))
    assert used, "no template read"
    assert used <= set(TEMPLATE_VARS) | set(MANIFEST_VARS), used - set(TEMPLATE_VARS) - set(MANIFEST_VARS)
