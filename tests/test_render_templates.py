"""Editable templates: `hpcprof templates copy DIR`, then `--templates DIR` or a site's
`templates:` key picks up the edit; a template error is one line, exit code 2."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hpcprof_cli import hpcprof as run_cli

from hpcprof.cli import main
from hpcprof.render.job import shipped_template_dir

EXPERIMENT = {"name": "tpl", "workload": {"kind": "command", "argv": ["true"]},
              "resources": {"nodes": 1, "ranks_per_node": 1}}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def hpcprof(*args: str, real: bool = False) -> Result:
    """Run the CLI in the current directory: in-process, or (`real`) as its own process."""
    if real:
        proc = run_cli(*args, timeout=60)
        return Result(proc.returncode, proc.stdout, proc.stderr)
    result = CliRunner().invoke(main, list(args))
    return Result(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture()
def copied(tmp_path: Path) -> Path:
    """Templates copied with the CLI into tmp_path/tpl, with a marker line added to the local
    job template; the experiment file is tmp_path/exp.yaml."""
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    result = hpcprof("templates", "copy", "tpl")
    assert result.returncode == 0, result.stderr
    directory = tmp_path / "tpl"
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        p.name for p in shipped_template_dir().glob("*.j2"))
    local = directory / "local.sh.j2"
    local.write_text(local.read_text().replace(
        "{{ job.prologue() }}", "{{ job.prologue() }}\necho edited-template {{ experiment | q }}"))
    return directory


def test_copy_refuses_to_overwrite(copied: Path) -> None:
    result = hpcprof("templates", "copy", str(copied))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "exists" in result.stderr


def test_templates_option_uses_the_edit(copied: Path) -> None:
    tmp = copied.parent
    result = hpcprof("render", "exp.yaml", "--site", "local", "--templates", "tpl", "-o", "out")
    assert result.returncode == 0, result.stderr
    assert "echo edited-template tpl\n" in (tmp / "out" / "job.sh").read_text()
    plain = hpcprof("render", "exp.yaml", "--site", "local")
    assert plain.returncode == 0 and "edited-template" not in plain.stdout


def test_site_templates_key_uses_the_edit(copied: Path) -> None:
    """A site file with `templates: DIR` renders with the edited copy; the shipped
    rank_wrapper.sh.j2 is still found for templates the directory lacks."""
    tmp = copied.parent
    (copied / "rank_wrapper.sh.j2").unlink()
    site = yaml.safe_load((Path(__file__).parents[1] / "site_configs" / "local.yaml").read_text())
    site |= {"name": "mysite", "templates": str(copied)}
    (tmp / "mysite.yaml").write_text(yaml.safe_dump(site))
    result = hpcprof("render", "exp.yaml", "--site-file", "mysite.yaml", "-o", "out")
    assert result.returncode == 0, result.stderr
    assert "echo edited-template tpl\n" in (tmp / "out" / "job.sh").read_text()
    assert "hp_first PALS_RANKID" in (tmp / "out" / "rank_wrapper.sh").read_text()


def test_site_templates_dir_missing(tmp_path: Path) -> None:
    site = yaml.safe_load((Path(__file__).parents[1] / "site_configs" / "local.yaml").read_text())
    site["templates"] = str(tmp_path / "nowhere")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    result = hpcprof("render", "exp.yaml", "--site-file", "s.yaml")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "templates directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_variable_is_one_line_exit_2(copied: Path) -> None:
    """StrictUndefined: a misspelt variable fails the render with the template and line."""
    tmp = copied.parent
    local = copied / "local.sh.j2"
    local.write_text(local.read_text().replace("edited-template", "{{ run_idd }}"))
    result = hpcprof("submit", "exp.yaml", "--site", "local", "--templates", "tpl",
                     "--workdir", "runs", real=True)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert re.search(r"tpl/local\.sh\.j2:\d+: 'run_idd' is undefined$", lines[0]), lines[0]
    assert not (tmp / "runs").exists()


def test_template_syntax_error_is_one_line(copied: Path) -> None:
    local = copied / "local.sh.j2"
    local.write_text(local.read_text() + "{% if %}\n")
    result = hpcprof("render", "exp.yaml", "--site", "local", "--templates", "tpl")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "local.sh.j2" in result.stderr
