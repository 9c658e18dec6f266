"""A plain (non-editable) install carries every module, the templates and the site configs."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_templates_and_sites(repo: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(repo)], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("hpcprof-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in ("pbs.sh.j2", "slurm.sh.j2", "local.sh.j2", "rank_wrapper.sh.j2", "_job.sh.j2"):
        assert f"hpcprof/_templates/{template}" in names
    for site in ("local", "slurm-local", "polaris", "perlmutter", "pbs-local", "local-podman"):
        assert f"hpcprof/_site_configs/{site}.yaml" in names
    for module in sorted((repo / "hpcprof").rglob("*.py")):     # every module of the source tree
        assert module.relative_to(repo).as_posix() in names

    unpacked = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = ("from hpcprof.core.resources import template_dir, site_config_dir;"
             "from hpcprof.config.site import find_site;"
             "print(template_dir()); print(site_config_dir()); print(find_site('polaris').scheduler)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"}, check=True).stdout.split()
    assert out[0].startswith(str(unpacked)) and out[1].startswith(str(unpacked))
    assert out[2] == "pbs"


def setup_cfg() -> configparser.ConfigParser:
    """The repository's setup.cfg, parsed."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def test_every_package_is_listed_in_setup_cfg() -> None:
    """A package left out of setup.cfg's `packages` is missing from the installed hpcprof (the tests run the
    installed one): every folder of hpcprof/ with an __init__.py is listed."""
    listed = set(setup_cfg()["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "hpcprof").rglob("__init__.py")}
    assert found - listed == set()


def test_isal_is_a_dependency_where_it_has_wheels() -> None:
    """ISA-L's inflate (trace/stream.py: `hpcprof trace all` of 2 x 72 MB traces 1.11 -> 1.03 s on 2 vCPUs, 0.77 ->
    0.69 s on 16 CPUs) comes with a plain install on x86-64 and ARM64 (its wheels), not only with an extra."""
    from packaging.requirements import Requirement

    config = setup_cfg()
    required = [Requirement(line) for line in config["options"]["install_requires"].splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    (isal,) = [r for r in required if r.name == "isal"]
    assert isal.marker is not None
    for machine, wanted in (("x86_64", True), ("AMD64", True), ("aarch64", True), ("arm64", True), ("ppc64le", False)):
        assert isal.marker.evaluate({"platform_machine": machine}) is wanted, machine
    extras = config["options.extras_require"]
    assert [name for name in extras if "isal" in extras[name]] == []          # no extra that also lists it
