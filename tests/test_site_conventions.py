"""What a user of Polaris or Perlmutter expects from the shipped sites: queue limits checked when
rendering (one line naming the field, the limit and the queues that would take the job, exit 2,
nothing written), GPU accounts with Perlmutter's `_g` suffix, a per-site work directory, and
module versions pinned."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
import yaml
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.config.site import available_sites, expand_workdir, find_site
from hpcprof.core.errors import UserError

REPO = Path(__file__).resolve().parents[1]
POLARIS_EXP = REPO / "examples" / "seqpar_polaris.yaml"


def render(site: str, *sets: str, cwd: Path) -> tuple[int, str]:
    args = ["render", str(POLARIS_EXP), "--site", site, "-o", str(cwd / "out")]
    for value in sets:
        args += ["--set", value]
    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output


@pytest.mark.parametrize(("site", "sets", "field", "needle"), [
    ("polaris", ["resources.nodes=3"], "resources.nodes", "queue debug of site polaris takes 1-2 nodes; "
                                                          "queues that take it: debug-scaling, preemptable"),
    ("polaris", ["resources.walltime='02:00:00'"], "resources.walltime", "allows at most 01:00:00"),
    ("polaris", ["resources.queue=prod", "resources.nodes=4"], "resources.nodes", "takes 10-496 nodes"),
    ("polaris", ["resources.queue=prod", "resources.nodes=30", "resources.walltime='10:00:00'"],
     "resources.walltime", "allows at most 06:00:00 for 30 nodes"),
    ("polaris", ["resources.queue=capacity"], "resources.queue", "capacity is not a queue of site polaris"),
    ("perlmutter", ["resources.account=m1234_g", "resources.queue=debug", "resources.walltime='01:00:00'"],
     "resources.walltime", "queue debug of site perlmutter allows at most 00:30:00"),
    ("perlmutter", ["resources.account=m1234"], "resources.account", "use m1234_g"),
    ("polaris", [], "resources.account", "site polaris requires an account"),   # PBS on Polaris needs #PBS -A
])
def test_limits_and_accounts_are_one_line_errors_and_nothing_is_written(
        site: str, sets: list[str], field: str, needle: str, tmp_path: Path) -> None:
    code, output = render(site, *sets, cwd=tmp_path)
    assert code == 2, output
    assert f"field '{field}'" in output and needle in output, output
    assert len(output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("site", "sets"), [
    ("polaris", ["resources.account=PROJECT"]),                             # debug, 2 nodes, 10 min
    ("polaris", ["resources.account=PROJECT", "resources.queue=debug-scaling", "resources.nodes=8"]),
    ("polaris", ["resources.account=PROJECT", "resources.queue=prod", "resources.nodes=120",
                 "resources.walltime='20:00:00'"]),
    ("polaris", ["resources.account=PROJECT", "resources.queue=prod@polaris-pbs-01", "resources.nodes=12",
                 "resources.walltime='03:00:00'"]),
    ("perlmutter", ["resources.account=m1234_g"]),                         # regular, 2 nodes
])
def test_jobs_within_the_limits_render(site: str, sets: list[str], tmp_path: Path) -> None:
    code, output = render(site, *sets, cwd=tmp_path)
    assert code == 0, output
    assert (tmp_path / "out" / "p000" / "job.sh").exists()


def test_workdir_of_a_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert expand_workdir(find_site("polaris"), "datascience") == Path("/eagle/datascience/hpcprof")
    monkeypatch.setenv("PSCRATCH", "/pscratch/sd/u/user")
    assert expand_workdir(find_site("perlmutter"), None) == Path("/pscratch/sd/u/user/hpcprof")
    monkeypatch.delenv("PSCRATCH")
    with pytest.raises(Exception, match=r"uses \$PSCRATCH, which is not set here"):
        expand_workdir(find_site("perlmutter"), None)
    with pytest.raises(Exception, match=r"needs an account"):
        expand_workdir(find_site("polaris"), None)
    unknown_home = msgspec.structs.replace(find_site("polaris"), workdir="~no_such_user_here/hpcprof")
    with pytest.raises(UserError, match=r"^site polaris: field 'workdir': ~no_such_user_here/hpcprof: "
                                        r"~no_such_user_here names no home directory here; write the path out$"):
        expand_workdir(unknown_home, None)


def test_submit_uses_the_site_workdir_after_the_flag_and_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    site = tmp_path / "mine.yaml"
    site.write_text("name: mine\nscheduler: local\nlauncher: {kind: mpiexec, flavor: hydra, command: auto}\n"
                    "node: {cores: 4, ranks_per_node: 1}\npaths: {python: auto}\n"
                    "workdir: $MY_SCRATCH/{user}/hpcprof\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: x\nworkload: {kind: command, argv: ['true']}\n")
    monkeypatch.setenv("MY_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.delenv("HPCPROF_WORKDIR", raising=False)
    res = CliRunner().invoke(main, ["submit", str(exp), "--site-file", str(site), "--wait"])
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "scratch").glob("*/hpcprof/x/*/DONE"))) == 1       # {user} filled in
    assert "(site mine's workdir)" in res.output
    monkeypatch.setenv("HPCPROF_WORKDIR", str(tmp_path / "env-wins"))
    assert CliRunner().invoke(main, ["submit", str(exp), "--site-file", str(site), "--wait"]).exit_code == 0
    assert list((tmp_path / "env-wins" / "x").glob("*/DONE"))
    flag = tmp_path / "flag-wins"
    assert CliRunner().invoke(main, ["submit", str(exp), "--site-file", str(site), "--wait",
                                     "--workdir", str(flag)]).exit_code == 0
    assert list((flag / "x").glob("*/DONE"))


@pytest.mark.parametrize("value", ["$(rm -rf /)/x", "`id`/x", "/a b", "/a;b"])
def test_a_workdir_cannot_run_a_command(value: str, tmp_path: Path) -> None:
    site = tmp_path / "bad.yaml"
    site.write_text(yaml.safe_dump({"name": "bad", "scheduler": "local", "launcher": {"kind": "mpiexec",
                                    "flavor": "hydra"}, "workdir": value}))
    res = CliRunner().invoke(main, ["render", str(POLARIS_EXP), "--site-file", str(site)])
    assert res.exit_code == 2 and "workdir" in res.output and len(res.output.strip().splitlines()) == 1


def test_shipped_sites_pin_their_modules() -> None:
    loads = []
    for name, path in available_sites().items():
        for line in find_site(name, path).setup:
            loads += [(name, module) for module in re.findall(r"module load (.+)", line)[0].split()] \
                if "module load" in line else []
    assert loads, "no shipped site loads a module"
    assert all("/" in module for _, module in loads), [m for m in loads if "/" not in m[1]]
