"""The compiled templates' cache ($XDG_CACHE_HOME/hpcprof/templates): a render from it equals a render
that compiles every template, an edited template is compiled again, and a damaged entry or a cache
directory that cannot be used never fails a render."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import jinja2
import pytest

from hpcprof.config.experiment import expand
from hpcprof.config.site import find_site
from hpcprof.core.errors import UserError
from hpcprof.render.job import (
    ENV_OPTIONS,
    FILTERS,
    compiled_templates_cache,
    jinja_env,
    render_point,
    shipped_template_dir,
    template_dirs,
)

RUN_ID = "20250101-120000-abc123"
EXPERIMENT = {"name": "cached", "workload": {"kind": "seqpar", "args": {"hidden_dim": 512}},
              "resources": {"nodes": 2, "account": "PROJ", "walltime": "00:10:00"},
              "profile": {"tool": "nsys", "ranks": "local:0"}}


@pytest.fixture(autouse=True)
def fresh_environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each render below builds its Jinja environment anew (jinja_env keeps one per directory list)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jinja_env.cache_clear()
    yield
    jinja_env.cache_clear()


def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "hpcprof" / "templates"


def render_files(templates: Path | None = None) -> dict[str, str]:
    """The files of one Polaris point (PBS job script with its include, rank wrapper), rendered in
    a new environment."""
    jinja_env.cache_clear()
    site = find_site("polaris")
    (point,) = expand(EXPERIMENT, site, "experiment test")
    return render_point(point, site, Path("/lus/runs") / RUN_ID, RUN_ID, template_dirs(site, templates)).files


def uncached_files(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The same point rendered with no cache at all (every template compiled)."""
    with monkeypatch.context() as patch:
        patch.setattr("hpcprof.render.job.compiled_templates_cache", lambda: None)
        return render_files()


def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the templates Jinja compiles from here on."""
    compiled: list[str] = []
    original = jinja2.Environment.compile

    def compile_(self: jinja2.Environment, source: str, name: str | None = None, *args: object,
                 **kwargs: object) -> object:
        compiled.append(str(name))
        return original(self, source, name, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(jinja2.Environment, "compile", compile_)
    return compiled


def test_a_render_from_the_cache_equals_one_that_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = uncached_files(monkeypatch)
    assert not cache_dir(tmp_path).exists()
    compiled = count_compiles(monkeypatch)
    assert render_files() == expected  # compiled, then kept
    assert sorted(compiled) == ["_job.sh.j2", "pbs.sh.j2", "rank_wrapper.sh.j2"]
    entries = sorted(cache_dir(tmp_path).iterdir())
    assert len(entries) == 3
    assert stat.S_IMODE(cache_dir(tmp_path).stat().st_mode) == 0o700  # code that renders runs: this user's only
    compiled.clear()
    assert render_files() == expected  # read from the cache
    assert compiled == []


def test_an_edited_template_is_compiled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    templates = tmp_path / "tpl"
    shutil.copytree(shipped_template_dir(), templates)
    before = render_files(templates)["rank_wrapper.sh"]
    wrapper = templates / "rank_wrapper.sh.j2"
    wrapper.write_text(wrapper.read_text().replace("#!/bin/bash\n", "#!/bin/bash\n# edited {{ run_id }}\n", 1))
    compiled = count_compiles(monkeypatch)
    after = render_files(templates)["rank_wrapper.sh"]
    assert compiled == ["rank_wrapper.sh.j2"]  # the others are unchanged: from the cache
    assert after == before.replace("#!/bin/bash\n", f"#!/bin/bash\n# edited {RUN_ID}\n", 1)


@pytest.mark.parametrize("damage", [b"", b"not a cache entry", jinja2.bccache.bc_magic + b"garbage"],
                         ids=["empty", "not-jinja", "bad-checksum"])
def test_a_damaged_entry_is_compiled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes) -> None:
    expected = render_files()
    for entry in cache_dir(tmp_path).iterdir():
        entry.write_bytes(damage)
    compiled = count_compiles(monkeypatch)
    assert render_files() == expected
    assert len(compiled) == 3
    compiled.clear()
    assert render_files() == expected and compiled == []  # kept whole again


def test_a_truncated_entry_is_compiled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = render_files()
    for entry in cache_dir(tmp_path).iterdir():
        data = entry.read_bytes()
        entry.write_bytes(data[:len(data) // 2])  # as a full disk or a killed writer leaves it
    compiled = count_compiles(monkeypatch)
    assert render_files() == expected
    assert len(compiled) == 3


def test_a_cache_that_cannot_be_made_renders_all_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = uncached_files(monkeypatch)
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    assert compiled_templates_cache() is None
    assert render_files() == expected


def test_a_cache_directory_removed_mid_run_renders_all_the_same(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory goes (a cleaner of ~/.cache) after the environment was made: the compiled
    templates cannot be written, the render goes on."""
    expected = uncached_files(monkeypatch)
    site = find_site("polaris")
    (point,) = expand(EXPERIMENT, site, "experiment test")
    dirs = template_dirs(site, None)
    jinja_env.cache_clear()
    assert jinja_env(dirs).bytecode_cache is not None
    shutil.rmtree(tmp_path / "cache")
    assert render_point(point, site, Path("/lus/runs") / RUN_ID, RUN_ID, dirs).files == expected
    assert not (tmp_path / "cache").exists()


def no_passwd_entry(uid: int) -> NoReturn:
    raise KeyError(f"getpwuid(): uid not found: {uid}")


def test_no_home_directory_means_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative $XDG_CACHE_HOME is ignored (XDG); with no home directory either, nothing is made in
    the current directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = compiled_templates_cache()
    assert cache is not None and cache.directory == str(tmp_path / "home" / ".cache" / "hpcprof" / "templates")
    monkeypatch.delenv("HOME")  # and a user id with no passwd entry (a container's arbitrary uid)
    monkeypatch.setattr(pwd, "getpwuid", no_passwd_entry)
    assert os.path.expanduser("~") == "~"
    assert compiled_templates_cache() is None
    render_files()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the cache directory to another user")
def test_a_cache_directory_of_another_user_is_not_used(tmp_path: Path) -> None:
    directory = cache_dir(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    os.chown(directory, 65534, 65534)
    assert compiled_templates_cache() is None  # its entries could be anyone's code
    render_files()
    assert list(directory.iterdir()) == []


def test_entries_are_named_for_jinja_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another Jinja or other environment options (which change the compiled code) use other entries."""
    cache = compiled_templates_cache()
    assert cache is not None and cache.directory == str(cache_dir(tmp_path))
    monkeypatch.setattr(jinja2, "__version__", "0.0-other")
    other = compiled_templates_cache()
    assert other is not None and other.pattern != cache.pattern
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(ENV_OPTIONS, "trim_blocks", True)
    trimmed = compiled_templates_cache()
    assert trimmed is not None and trimmed.pattern != cache.pattern
    monkeypatch.setitem(FILTERS, "extra", str)
    assert compiled_templates_cache().pattern not in (cache.pattern, trimmed.pattern)  # type: ignore[union-attr]


def test_a_template_error_from_a_cached_template_names_its_line(tmp_path: Path) -> None:
    """A cached template's code keeps its file name and line map: an error while rendering it
    still names the template's line."""
    templates = tmp_path / "tpl"
    shutil.copytree(shipped_template_dir(), templates)
    wrapper = templates / "rank_wrapper.sh.j2"
    lines = wrapper.read_text().splitlines(keepends=True)
    lines.insert(1, "{{ 1 // (world_size - world_size) }}\n")
    wrapper.write_text("".join(lines))
    for _ in range(2):  # compiled, then from the cache
        with pytest.raises(UserError, match=r"tpl/rank_wrapper\.sh\.j2:2: ZeroDivisionError"):
            render_files(templates)
    assert len(list(cache_dir(tmp_path).iterdir())) == 3
