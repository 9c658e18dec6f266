"""Config faults a user can make: ambiguous sweeps, repeat in the point limit, env values past the
kernel's limits or read by YAML 1.1 as something else, merge keys, --site as a path, huge values,
templates in Jinja's sandbox and their errors as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprof_cli import hpcprof
from reliability_util import experiment, ok, one_line_error

from hpcprof.config.experiment import expand, load_experiment, parse_override
from hpcprof.config.site import find_site
from hpcprof.config.validation import parse_yaml
from hpcprof.core.errors import UserError

BASE = 'name: t\nworkload:\n  kind: command\n  argv: ["true"]\n'


def points(tmp_path: Path, text: str, max_points: int = 1000) -> int:
    path = tmp_path / "e.yaml"
    path.write_text(BASE + text)
    return len(expand(load_experiment(path), find_site("local"), "experiment e.yaml", max_points))


@pytest.mark.parametrize("sweep, words", [
    ("  env.A: [a, b]\n  env.A,env.B: [[c, d]]\n", ["'env.A'", "one key"]),
    ("  env.A,env.A: [[a, b]]\n", ["'env.A' twice"]),
    ("  resources: [{nodes: 1}]\n  resources.nodes: [1, 2]\n", ["'resources'"]),
])
def test_a_field_swept_twice_is_refused(tmp_path: Path, sweep: str, words: list[str]) -> None:
    with pytest.raises(UserError) as error:
        points(tmp_path, "sweep:\n" + sweep)
    assert all(w in error.value.format_message() for w in words), error.value.format_message()


def test_repeat_counts_in_the_point_limit(tmp_path: Path) -> None:
    assert points(tmp_path, "repeat: 3\nsweep:\n  env.A: [a, b]\n") == 6
    with pytest.raises(UserError, match=r"3000 points \(3 x repeat 1000\).*--max-points"):
        points(tmp_path, "repeat: 1000\nsweep:\n  env.A: [a, b, c]\n")
    assert points(tmp_path, "repeat: 1000\nsweep:\n  env.A: [a, b, c]\n", max_points=3000) == 3000


def test_env_within_the_kernel_limits(tmp_path: Path) -> None:
    assert points(tmp_path, f"env:\n  OK: {'x' * (128 * 1024 - 20)}\n") == 1
    with pytest.raises(UserError, match="MAX_ARG_STRLEN"):
        points(tmp_path, f"env:\n  BIG: {'x' * (128 * 1024)}\n")
    many = "".join(f"  V{i}: {'y' * 120_000}\n" for i in range(10))
    with pytest.raises(UserError, match="ARG_MAX"):
        points(tmp_path, f"env:\n{many}")


@pytest.mark.parametrize("value, read_as", [("0755", "the number 493"), ("yes", "a boolean true"),
                                            ("off", "a boolean false"), ("3.10", "the number 3.1"),
                                            ("0x1F", "the number 31"), ("1_000", "the number 1000"),
                                            ("1:30", "the number 90")])
def test_yaml_11_surprises_in_env_are_refused(tmp_path: Path, value: str, read_as: str) -> None:
    path = experiment(tmp_path / "e.yaml", ["true"], f"env:\n  MODE: {value}\n")
    line = one_line_error(hpcprof("render", str(path), cwd=tmp_path), "line 9", "MODE", read_as)
    assert f'MODE: "{value}"' in line
    quoted = experiment(tmp_path / "q.yaml", ["true"], f"env:\n  MODE: '{value}'\n")
    assert f"MODE={value}" in ok(hpcprof("render", str(quoted), cwd=tmp_path)).stdout


def test_plain_numbers_and_set_env_stay_text(tmp_path: Path) -> None:
    assert parse_yaml("env:\n  PORT: 8080\n  RATIO: 1.5\n") == {"env": {"PORT": 8080, "RATIO": 1.5}}
    assert parse_override("env.MODE=0755") == ("env.MODE", "0755")
    assert parse_override("resources.nodes=2") == ("resources.nodes", 2)
    with pytest.raises(Exception, match="0755"):
        parse_yaml("sweep:\n  env.MODE: [0755]\n")


def test_yaml_merge_keys(tmp_path: Path) -> None:
    data = parse_yaml("base: &b {nodes: 2, walltime: '00:10:00'}\nresources:\n  <<: *b\n  walltime: '00:05:00'\n")
    assert data["resources"] == {"nodes": 2, "walltime": "00:05:00"}
    with pytest.raises(Exception, match="duplicate key 'nodes'"):  # a mapping's own keys still once each
        parse_yaml("resources:\n  <<: {walltime: '00:10:00'}\n  nodes: 1\n  nodes: 2\n")


def bomb(under: str) -> str:
    """An alias bomb of 9^9 values in 9 lines under `under`."""
    lines = [f"  a: &a [{', '.join(['lol'] * 9)}]"]
    lines += [f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    return f"{under}:\n" + "\n".join(lines) + "\n"


def merges() -> str:
    """Merge keys of merged mappings, each merging the one before three times: 3^19 merged pairs in 800 bytes."""
    return "x0: &x0 {k0: 1, k1: 2}\n" + "".join(f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}, *x{i - 1}], k{i}: 1}}\n"
                                                for i in range(1, 20))


@pytest.mark.parametrize("text", [bomb("unknown"), bomb("sweep"), bomb("env"), merges()],
                         ids=["bomb under an unknown key", "bomb in sweep", "bomb in env", "merge keys"])
def test_alias_bombs_and_merge_blow_ups_are_refused_before_expansion(tmp_path: Path, text: str) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: t\nworkload:\n  kind: command\n  argv: [\"true\"]\n" + text)
    result = hpcprof("render", str(exp), "--site", "local", "-o", "out", cwd=tmp_path, timeout=20)
    assert "aliases expand to more than 100,000 values" in one_line_error(result)
    assert not (tmp_path / "out").exists()
    small = "base: &b [1, 2]\nuse: [*b, *b, *b]\n"      # aliases that expand to little are as before
    assert parse_yaml(small) == {"base": [1, 2], "use": [[1, 2]] * 3}


def test_site_name_is_not_a_path(tmp_path: Path) -> None:
    (tmp_path / "evil.yaml").write_text("name: evil\nscheduler: local\nlauncher: {kind: torchrun}\n")
    exp = experiment(tmp_path / "e.yaml", ["true"])
    (tmp_path / "sites").mkdir()
    one_line_error(hpcprof("render", str(exp), "--site", "../evil", cwd=tmp_path,
                           env={"HPCPROF_SITE_PATH": str(tmp_path / "sites")}), "not a site name", "--site-file")


def test_a_huge_bad_value_is_cut_in_the_error_line(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: '{'n' * 1_000_000}'\n" + BASE.split("\n", 1)[1])
    line = one_line_error(hpcprof("render", str(path), cwd=tmp_path), "name", "characters cut")
    assert len(line) < 2100


@pytest.mark.parametrize("body, words", [
    ("{{ 1 // 0 }}", ["ZeroDivisionError"]),
    ("{{ 1 + 'a' }}", ["TypeError"]),
    ("{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}", ["unsafe"]),
    ("{{ run_id.__class__.__mro__[1].__subclasses__() }}", ["unsafe"]),
])
def test_templates_render_in_the_sandbox_and_fail_in_one_line(tmp_path: Path, body: str, words: list[str]) -> None:
    ok(hpcprof("templates", "copy", "t", cwd=tmp_path))
    job = tmp_path / "t" / "local.sh.j2"
    lines = job.read_text().splitlines(keepends=True)
    job.write_text("".join(lines[:3]) + body + "\n" + "".join(lines[3:]))
    exp = experiment(tmp_path / "e.yaml", ["true"])
    one_line_error(hpcprof("render", str(exp), "--templates", "t", cwd=tmp_path), "local.sh.j2:4", *words)
    assert not (tmp_path / "PWNED").exists()


def test_sites_lists_past_a_broken_one_and_escapes_control_characters(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("name: [\n")
    (tmp_path / "ansi.yaml").write_text('name: ansi\ndescription: "\\e[2J\\e[31mred [bold]x[/bold]"\n'
                                        "scheduler: local\nlauncher: {kind: torchrun}\n")
    result = ok(hpcprof("sites", cwd=tmp_path, env={"HPCPROF_SITE_PATH": str(tmp_path)}))
    assert "\x1b" not in result.stdout and "\\x1b[31mred [bold]x[/bold]" in result.stdout
    assert "polaris" in result.stdout and "broken.yaml" in result.stderr and "Traceback" not in result.stderr
