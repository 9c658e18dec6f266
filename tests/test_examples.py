"""Every shipped example validates and renders on every shipped site."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprof.campaign import plan
from hpcprof.config.site import available_sites, find_site
from hpcprof.errors import UserError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("site_name", sorted(available_sites()))
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_renders(example: Path, site_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    site = find_site(site_name)
    # an example's account is Polaris's; a site whose GPU accounts carry a suffix gets one of its own
    overrides = [f"resources.account=m1234{site.gpu_account_suffix}"] if site.gpu_account_suffix else []
    planned = plan(example, site, overrides, tmp_path)
    assert planned.runs and all("rank_wrapper.sh" in r.files["job.sh"] for r in planned.runs)
    assert not any(tmp_path.iterdir()), "planning must not write"


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
