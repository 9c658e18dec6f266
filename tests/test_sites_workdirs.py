"""Finding the runs: submit to a site with a `workdir:` records it per user; `status`, `collect`,
`report` and `compare` take `--site S` to look there, and from a directory without runs they list
where the runs are (one line, exit 2). Real local runs (MPICH Hydra, the command example)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.config.site import shipped_site_dir

REPO = Path(__file__).resolve().parents[1]
#: The CLI runs this checkout, with no $HPCPROF_WORKDIR from the caller.
CLI_ENV = {"PYTHONPATH": str(REPO), "HPCPROF_WORKDIR": None}


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Site `mysite` (the local site with `workdir: <tmp>/site-runs`) on $HPCPROF_SITE_PATH."""
    sites = tmp_path / "sites"
    sites.mkdir()
    data = yaml.safe_load((shipped_site_dir() / "local.yaml").read_text())
    data.update(name="mysite", workdir=str(tmp_path / "site-runs"))
    (sites / "mysite.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("HPCPROF_SITE_PATH", str(sites))
    return sites


@pytest.mark.slow
def test_site_option_finds_the_runs_in_the_site_workdir(tmp_path: Path, site_dir: Path) -> None:
    submit_dir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    submit_dir.mkdir()
    elsewhere.mkdir()
    sub = hpcprof("submit", str(REPO / "examples/command_hello.yaml"), "--site", "mysite", "--wait", cwd=submit_dir, env=CLI_ENV)
    assert sub.returncode == 0, sub.stderr
    assert f"runs are under {tmp_path}/site-runs (site mysite's workdir)" in sub.stderr
    assert not (submit_dir / "hpcprof-runs").exists()
    recorded = (Path(os.environ["XDG_STATE_HOME"]) / "hpcprof" / "workdirs").read_text()
    assert recorded == f"mysite\t{tmp_path}/site-runs\n"

    lost = hpcprof("status", cwd=elsewhere, env=CLI_ENV)
    assert lost.returncode == 2
    assert lost.stderr.strip() == (
        f"Error: no runs under hpcprof-runs; runs you submitted are under {tmp_path}/site-runs (site mysite, 1 run): "
        f"give --site mysite or --workdir {tmp_path}/site-runs")
    assert not (elsewhere / "hpcprof-runs").exists()

    status = hpcprof("status", "--site", "mysite", "--format", "json", cwd=elsewhere, env=CLI_ENV)
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    assert row["state"] == "COMPLETED" and row["path"].startswith(f"{tmp_path}/site-runs/hello/")
    assert row["sweep"] == row["run"]                 # one point: the sweep id is the run id

    collect = hpcprof("collect", "--site", "mysite", cwd=elsewhere, env=CLI_ENV)
    assert collect.returncode == 0, collect.stderr
    report = hpcprof("report", "--site", "mysite", cwd=elsewhere, env=CLI_ENV)
    assert report.returncode == 0, report.stderr
    assert row["run"] in report.stdout
    compare = hpcprof("compare", "--site", "mysite", "--format", "json", cwd=elsewhere, env=CLI_ENV)
    assert compare.returncode == 0, compare.stderr
    assert json.loads(compare.stdout)[0]["run"] == row["run"]
    assert not (elsewhere / "hpcprof-runs").exists()


def test_site_without_workdir_or_record_is_one_line(tmp_path: Path) -> None:
    result = hpcprof("status", "--site", "local", cwd=tmp_path, env=CLI_ENV)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("Error: --site local: the site has no workdir: and no submit to it was "
                                            "recorded")
