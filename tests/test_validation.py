"""Bad input through the real CLI: exit code 2, one line on stderr naming the field, no
traceback, nothing written. And a 2 x 2 sweep: four runs sharing the sweep id."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from hpcprof.cli import main

GOOD: dict[str, Any] = {
    "name": "val",
    "workload": {"kind": "command", "argv": ["true"]},
    "resources": {"nodes": 1, "ranks_per_node": 1},
    "profile": {"tool": "none"},
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command runs in tmp_path, so any stray write shows up there."""
    monkeypatch.chdir(tmp_path)


def with_(path: str, value: Any) -> dict[str, Any]:
    """GOOD with `a.b.c` set to `value` (a deep copy)."""
    data = json.loads(json.dumps(GOOD))
    node = data
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


def invoke(tmp_path: Path, args: list[str], experiment: dict[str, Any] | str | None = None):  # type: ignore[no-untyped-def]
    """Run `hpcprof ARGS` in tmp_path with exp.yaml written from `experiment`."""
    text = experiment if isinstance(experiment, str) else yaml.safe_dump(experiment or GOOD)
    (tmp_path / "exp.yaml").write_text(text)
    return CliRunner().invoke(main, args, env={"HPCPROF_WORKDIR": str(tmp_path / "runs"),
                                               "HPCPROF_SITE_PATH": ""})


def assert_user_error(tmp_path: Path, result: Any, *needles: str) -> str:
    """Exit 2, one stderr line containing every needle, no traceback, only exp.yaml on disk."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]
    return lines[0]


CASES = [
    ("unknown-key", with_("resources.nodez", 2), [], ["'resources.nodez'", "allowed keys: account,", "nodes"]),
    ("unknown-top-key", with_("profiles", {"tool": "nsys"}), [], ["'profiles'", "profile, repeat, resources"]),
    ("wrong-type", with_("resources.nodes", "two"), [], ["'resources.nodes'", "integer", "'two'"]),
    ("negative-nodes", with_("resources.nodes", -1), [], ["'resources.nodes'", "expected an integer >= 1 (got -1)"]),
    ("too-many-ranks", with_("resources.ranks_per_node", 65), [], ["'resources.ranks_per_node'", "64 hardware threads"]),
    ("depth-x-ranks", with_("resources.ranks_per_node", 9), ["--site", "polaris"],
     ["'resources.ranks_per_node'", "depth 8", "64 hardware threads"]),
    ("too-many-nodes", with_("resources.nodes", 497), ["--site", "polaris"], ["'resources.nodes'", "at most 496"]),
    ("walltime-over-max", with_("resources.walltime", "25:00:00"), ["--site", "polaris"],
     ["'resources.walltime'", "site maximum 24:00:00"]),
    ("walltime-format", with_("resources.walltime", "1 hour"), [], ["'resources.walltime'", "HH:MM:SS"]),
    ("queue-in-directive", with_("resources.queue", "debug -A other"), [], ["'resources.queue'", "batch directive"]),
    ("unknown-site", GOOD, ["--site", "nowhere"], ["--site 'nowhere'", "available:", "polaris"]),
    ("unknown-tool", with_("profile.tool", "vtune"), [], ["'profile.tool'", "'nsys'", "'vtune'"]),
    ("unknown-kind", with_("workload.kind", "mpi"), [], ["'workload.kind'", "'command'"]),
    ("bad-policy", with_("profile.ranks", "local:x"), [], ["'profile.ranks'", "local:K", "first-nodes:N"]),
    ("policy-twice", with_("profile.ranks", "local:0+local:1"), [], ["'profile.ranks'", "local twice"]),
    ("selects-no-rank", {**with_("profile.tool", "nsys"), "profile": {"tool": "nsys", "ranks": [7]}}, [],
     ["'profile.ranks'", "selects none of the 1 ranks"]),
    ("capture-range-end", with_("profile.nsys", {"capture_range": "cudaProfilerApi",
                                                 "capture_range_end": "sometimes"}), [],
     ["'profile.nsys.capture_range_end'", "repeat[:N]"]),
    ("nvtx-without-range", with_("profile.nsys", {"capture_range": "nvtx"}), [],
     ["'profile.nsys'", "nvtx_capture"]),
    ("nvtx-capture-alone", with_("profile.nsys", {"nvtx_capture": "step"}), [],
     ["'profile.nsys'", "capture_range: nvtx"]),
    ("mpi-trace-no-impl", with_("profile.nsys", {"trace": ["cuda", "mpi"]}), [], ["'profile.nsys'", "mpi_impl"]),
    ("bad-trace", with_("profile.nsys", {"trace": ["cuda", "gpu"]}), [], ["'profile.nsys.trace'", "'gpu'"]),
    ("ncu-negative-skip", with_("profile.ncu", {"launch_skip": -1}), [], ["'profile.ncu.launch_skip'"]),
    ("env-name", with_("env", {"BAD NAME": "1"}), [], ["'env'", "'BAD NAME'"]),
    ("env-reserved", with_("env", {"BASH_ENV": "/tmp/x"}), [], ["'env'", "BASH_ENV is reserved"]),
    ("command-without-argv", with_("workload", {"kind": "command"}), [], ["'workload'", "argv"]),
    ("set-bad-key", GOOD, ["--set", "resources..nodes=2"], ["--set 'resources..nodes=2'", "dotted.key=value"]),
    ("set-unknown-key", GOOD, ["--set", "resources.nodez=2"], ["'resources.nodez'", "allowed keys"]),
    ("set-not-mapping", GOOD, ["--set", "name.x=1"], ["--set name.x=1", "'name' is not a mapping"]),
    ("set-wrong-type", GOOD, ["--set", "resources.nodes=[1]"], ["'resources.nodes'", "integer"]),
    ("bad-yaml", "name: [unclosed\nworkload: {kind: command}\n", [], ["exp.yaml", "line", "not valid YAML"]),
    ("not-a-mapping", "- just\n- a list\n", [], ["exp.yaml", "mapping"]),
    ("empty-sweep", with_("sweep", {"resources.nodes": []}), [], ["'sweep'", "no values"]),
    ("bad-sweep-point", with_("sweep", {"resources.nodes": [1, -2]}), [],
     ["sweep point 1: resources.nodes=-2", "'resources.nodes'"]),
]


@pytest.mark.parametrize(("experiment", "options", "needles"),
                         [pytest.param(e, o, n, id=i) for i, e, o, n in CASES])
def test_submit_rejects(tmp_path: Path, experiment: Any, options: list[str], needles: list[str]) -> None:
    result = invoke(tmp_path, ["submit", "exp.yaml", "--workdir", str(tmp_path / "runs"), *options],
                    experiment)
    line = assert_user_error(tmp_path, result, *needles)
    assert line.startswith("Error: ")


def test_render_rejects_the_same_way(tmp_path: Path) -> None:
    result = invoke(tmp_path, ["render", "exp.yaml", "-o", str(tmp_path / "out")],
                    with_("resources.nodes", 0))
    assert_user_error(tmp_path, result, "'resources.nodes'")


def test_bad_site_file(tmp_path: Path) -> None:
    """A site file with an unknown key names the key and the allowed ones."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "launcher": {"kind": "srun"},
                                    "nodes": {"gpus": 1}}))
    result = invoke(tmp_path, ["submit", "exp.yaml", "--site-file", str(site)])
    site.unlink()
    assert_user_error(tmp_path, result, "site config", "unknown key 'nodes'", "node,")


def test_site_options_line_rejected(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "x", "scheduler": "pbs", "launcher": {"kind": "mpiexec", "flavor": "pals"},
                                    "pbs_options": ["-r y\nrm -rf ~"]}))
    result = invoke(tmp_path, ["submit", "exp.yaml", "--site-file", str(site)])
    site.unlink()
    assert_user_error(tmp_path, result, "'pbs_options'", "not a batch option")


def test_sweep_two_by_two(tmp_path: Path) -> None:
    """A 2 x 2 sweep runs 4 points locally: distinct run ids `<sweep>-p000..p003`, each run
    directory holding its own point."""
    exp = {**GOOD, "sweep": {"resources.ranks_per_node": [1, 2],
                             "workload.argv": [["true"], ["bash", "-c", "exit 0"]]}}
    workdir = tmp_path / "runs"
    result = invoke(tmp_path, ["submit", "exp.yaml", "--workdir", str(workdir), "--wait"], exp)
    assert result.exit_code == 0, result.output
    run_dirs = sorted((workdir / "val").iterdir())
    ids = [p.name for p in run_dirs]
    assert len(set(ids)) == 4
    sweep_id = ids[0].rsplit("-p", 1)[0]
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", sweep_id)
    assert ids == [f"{sweep_id}-p{i:03d}" for i in range(4)]
    params = [json.loads((p / "config.json").read_text())["sweep_point"]["params"] for p in run_dirs]
    assert params == [
        {"resources.ranks_per_node": 1, "workload.argv": ["true"]},
        {"resources.ranks_per_node": 1, "workload.argv": ["bash", "-c", "exit 0"]},
        {"resources.ranks_per_node": 2, "workload.argv": ["true"]},
        {"resources.ranks_per_node": 2, "workload.argv": ["bash", "-c", "exit 0"]},
    ]
    for run_dir, point in zip(run_dirs, params, strict=True):
        assert (run_dir / "DONE").exists()
        assert len(list((run_dir / "logs").glob("rank*.log"))) == point["resources.ranks_per_node"]
