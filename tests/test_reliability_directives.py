"""Reliability: values that go into #PBS/#SBATCH lines are checked per scheduler and field, and
the rendered script is parsed back and checked against the site's limits; the Slurm cases go
through the real one-node Slurm (tests/slurm_cluster.py) and check nothing reached its queue."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error, runs, state

REPO = Path(__file__).resolve().parents[1]

SMUGGLED = {
    ("polaris", "filesystems", "home,walltime=72:00:00"),
    ("polaris", "account", "proj,select=400:ngpus=4"),
    ("polaris", "queue", "debug,walltime=72:00:00"),
    ("polaris", "filesystems", "home=1"),
    ("perlmutter", "account", "proj,gpu"),
    ("perlmutter", "queue", "regular=1"),
    ("slurm-local", "account", "a=b"),
}


@pytest.mark.parametrize("site,field,value", sorted(SMUGGLED))
def test_directive_smuggling_is_refused(site: str, field: str, value: str, tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"], f"  {field}: {json.dumps(value)}\n")
    one_line_error(hpcprof("render", str(exp), "--site", site, cwd=tmp_path), f"field 'resources.{field}'")


def test_site_defaults_are_checked_for_their_scheduler(tmp_path: Path) -> None:
    site = yaml.safe_load((REPO / "site_configs" / "polaris.yaml").read_text())
    site["pbs_select"] = "system=polaris,walltime=99:00:00"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(site))
    exp = experiment(tmp_path / "e.yaml", ["true"])
    one_line_error(hpcprof("render", str(exp), "--site-file", str(tmp_path / "s.yaml"), cwd=tmp_path),
                   "pbs_select")


def edited_templates(tmp_path: Path, name: str, extra: str) -> Path:
    """A templates directory whose NAME adds the line EXTRA after the shebang."""
    tmp_path.mkdir(exist_ok=True)
    directory = tmp_path / "tpl"
    ok(hpcprof("templates", "copy", str(directory), cwd=tmp_path))
    path = directory / name
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + extra + "\n" + "".join(lines[1:]))
    return directory


@pytest.mark.slow
def test_rendered_limits_are_enforced(tmp_path: Path) -> None:
    exp = experiment(tmp_path / "e.yaml", ["true"])
    tpl = edited_templates(tmp_path, "pbs.sh.j2", "#PBS -l walltime=72:00:00")
    one_line_error(hpcprof("render", str(exp), "--site", "polaris", "--set", "resources.account=PROJECT",
                           "--templates", str(tpl), cwd=tmp_path),
                   "walltime 2 times")
    site = yaml.safe_load((REPO / "site_configs" / "slurm-local.yaml").read_text())
    site["node"]["max_nodes"] = 1
    site["defaults"]["max_walltime"] = "00:20:00"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(site))
    tpl = edited_templates(tmp_path / "b", "slurm.sh.j2", "#SBATCH --nodes=64")
    one_line_error(hpcprof("render", str(exp), "--site-file", str(tmp_path / "s.yaml"), "--templates", str(tpl),
                           cwd=tmp_path), "node count")
    one_line_error(hpcprof("render", str(exp), "--site-file", str(tmp_path / "s.yaml"),
                           "--set", "resources.walltime='01:00:00'", cwd=tmp_path), "walltime")


def queued() -> set[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30).stdout
    return set(out.split())


@pytest.mark.slurm
def test_slurm_receives_nothing_smuggled(tmp_path: Path, slurm_cluster: str) -> None:  # noqa: F811
    before = queued()
    exp = experiment(tmp_path / "e.yaml", ["true"], "  account: \"a,b\"\n")
    one_line_error(hpcprof("submit", str(exp), "--site", "slurm-local", cwd=tmp_path), "account")
    tpl = edited_templates(tmp_path, "slurm.sh.j2", "#SBATCH --time=72:00:00")
    good = experiment(tmp_path / "g.yaml", ["true"])
    one_line_error(hpcprof("submit", str(good), "--site", "slurm-local", "--templates", str(tpl), cwd=tmp_path),
                   "walltime 2 times")
    assert queued() == before
    assert runs(tmp_path / "hpcprof-runs") == []


@pytest.mark.slurm
def test_slurm_terminal_state_is_final(tmp_path: Path, slurm_cluster: str) -> None:  # noqa: F811
    exp = experiment(tmp_path / "e.yaml", ["bash", "-c", "exit 5"], "  walltime: '00:02:00'\n")
    result = hpcprof("submit", str(exp), "--site", "slurm-local", "--wait", cwd=tmp_path, timeout=300)
    assert result.returncode == 1, result.stderr
    [run] = runs(tmp_path / "hpcprof-runs")
    before = state(tmp_path, run)
    assert (before["state"], before["exit_code"]) == ("FAILED", 5)
    ok(hpcprof("cancel", run.name, cwd=tmp_path))
    assert state(tmp_path, run) == before
    assert "cancelled" not in (run / "status").read_text()
