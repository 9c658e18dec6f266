"""Every experiment the README shows and every shipped example validates and renders on every
shipped site (with an account where the site requires one), and Polaris refuses a job without one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hpcprof.campaign import plan
from hpcprof.config.site import SiteConfig, available_sites, find_site
from hpcprof.errors import UserError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def readme_experiments() -> list[tuple[str, str]]:
    """(id, text) of every ```yaml block of README.md that is an experiment (has `workload:`)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "README.md").read_text(), re.DOTALL | re.MULTILINE)
    found = [(f"README-{i}", text) for i, text in enumerate(blocks)
             if isinstance(yaml.safe_load(text), dict) and "workload" in yaml.safe_load(text)]
    assert found, "README.md shows no experiment"
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
@pytest.mark.parametrize("block", readme_experiments(), ids=lambda b: b[0])
def test_readme_experiment_renders(block: tuple[str, str], site_name: str, tmp_path: Path,
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
    texts = [p.read_text() for p in EXAMPLES] + [(REPO / "README.md").read_text()]
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
