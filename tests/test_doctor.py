"""`hpcprof doctor --site S` runs a site's job-start checks on this machine and names what is
missing; `hpcprof sites init NAME --venv DIR` writes the user's site file that activates the venv;
submit on a local site checks the profiler before anything is written."""

from __future__ import annotations

import json
import sys
import venv
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import hpcprof
from hpcprof.cli import main
from hpcprof.config.site import find_site, shipped_site_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user site directory of this test's own (sites init writes there)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HPCPROF_WORKDIR", raising=False)
    monkeypatch.chdir(tmp_path)


def doctor(*args: str) -> tuple[int, dict[str, dict[str, str]]]:
    result = CliRunner().invoke(main, ["doctor", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    rows = json.loads(result.output)
    return result.exit_code, {row["check"]: row for row in rows}


def test_doctor_names_each_missing_tool(tmp_path: Path) -> None:
    """A site file pointing at a Python, nsys and ncu that do not exist, a module system that is not
    here, Polaris's NCCL_NET without the plugin and no account: each is named with its fix."""
    data = yaml.safe_load((shipped_site_dir() / "polaris.yaml").read_text())
    data["setup"] = ["module load cudatoolkit/99.9"]
    data["paths"] = {"python": str(tmp_path / "no-venv" / "bin" / "python"), "nsys": str(tmp_path / "no" / "nsys"),
                     "ncu": "no-such-ncu"}
    site = tmp_path / "broken.yaml"
    site.write_text(yaml.safe_dump(data))
    code, rows = doctor("--site-file", str(site))
    assert code == 1
    assert rows["setup: module load cudatoolkit/99.9"]["status"] == "FAILED"
    assert "exit 127" in rows["setup: module load cudatoolkit/99.9"]["found"]
    assert rows["python"]["status"] == "MISSING" and str(tmp_path / "no-venv") in rows["python"]["found"]
    assert "hpcprof sites init polaris --venv DIR" in rows["python"]["fix"]
    assert rows["nsys"]["status"] == "MISSING" and rows["nsys"]["found"] == f"{tmp_path}/no/nsys: not on PATH"
    assert rows["ncu"]["status"] == "MISSING" and rows["ncu"]["found"] == "no-such-ncu: not on PATH"
    plugin = rows["NCCL network plugin"]
    assert plugin["status"] == "MISSING" and "NCCL_NET=AWS Libfabric: no libnccl-net*.so" in plugin["found"]
    assert rows["account"]["status"] == "MISSING" and "--account" in rows["account"]["fix"]


@pytest.mark.slow
def test_doctor_reports_versions_of_a_working_site(tmp_path: Path) -> None:
    """The local site here: this Python, hpcprof, torch (CPU build), mpi4py; exit 0 (nsys/ncu are
    reported, needed only to profile)."""
    import mpi4py
    import torch

    code, rows = doctor("--site", "local")
    assert code == 0
    assert rows["python"]["found"].endswith(f"({sys.executable})")
    assert rows["hpcprof"]["found"] == hpcprof.__version__
    assert rows["torch"]["found"] == torch.__version__
    assert rows["mpi4py"]["found"] == mpi4py.__version__
    assert rows["cuda"]["found"].startswith("none (CPU build)") if torch.version.cuda is None else True
    assert rows["workdir"]["status"] == "ok" and f"would be created under {tmp_path}" in rows["workdir"]["found"]
    assert rows["launcher"] == {"check": "launcher", "status": "ok", "found": f"{Path(sys.executable).parent}/mpiexec: "
                                "MPICH (Hydra) (flavor: auto)", "fix": ""}


@pytest.mark.parametrize(("launcher", "status", "found", "fix"), [
    ({"flavor": "openmpi"}, "FAILED", "{mpiexec}: MPICH (Hydra)'s mpiexec, where the site says flavor: openmpi",
     "set launcher.flavor: hydra in the site file, or launcher.command to Open MPI's mpiexec"),
    ({"command": "/bin/true"}, "FAILED", "/bin/true: its --version names none of MPICH (Hydra), Open MPI, Cray PALS",
     "set launcher.flavor to hydra, openmpi or pals in the site file"),
    ({"flavor": "hydra", "command": "/bin/true"}, "ok", "/bin/true: its --version names none of MPICH (Hydra), Open "
     "MPI, Cray PALS", ""),
    ({"command": "/nonexistent/mpiexec"}, "MISSING", "/nonexistent/mpiexec: not on PATH",
     "load its module in the site's setup: or set launcher.command to its full path"),
])
@pytest.mark.slow
def test_doctor_checks_the_launcher_and_its_flavour(tmp_path: Path, launcher: dict[str, str], status: str, found: str,
                                                    fix: str) -> None:
    """The launcher as the job finds it, and the flavour its real `--version` names (the mpich wheel's
    Hydra beside this Python) against launcher.flavor; exit 1 when it would fail the job."""
    data = yaml.safe_load((shipped_site_dir() / "local.yaml").read_text())
    data["launcher"] |= launcher
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(data))
    code, rows = doctor("--site-file", str(site))
    expected = {"status": status, "found": found.format(mpiexec=f"{Path(sys.executable).parent}/mpiexec"), "fix": fix}
    assert {k: rows["launcher"][k] for k in expected} == expected
    assert code == (0 if status == "ok" else 1)


@pytest.mark.slow
def test_doctor_workdir_of_polaris_with_account(tmp_path: Path) -> None:
    _, rows = doctor("--site", "polaris", "--account", "PROJECT")
    assert rows["account"]["found"] == "PROJECT"
    assert rows["workdir"]["found"].startswith("/eagle/PROJECT/hpcprof (would be created under /")


def test_sites_init_writes_a_site_that_activates_the_venv(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(env)
    result = CliRunner().invoke(main, ["sites", "init", "polaris", "--venv", str(env), "--account", "PROJECT"])
    assert result.exit_code == 0, result.output
    written = tmp_path / "config" / "hpcprof" / "sites" / "polaris.yaml"
    assert written.is_file()
    site = find_site("polaris")                       # the user's file now wins over the shipped one
    assert site.setup[-1] == f"source {env}/bin/activate" and site.setup[:3] == find_site(
        "polaris", shipped_site_dir() / "polaris.yaml").setup[:3]
    assert site.defaults.account == "PROJECT"
    rendered = CliRunner().invoke(main, ["render", str(REPO / "examples/seqpar_polaris.yaml"), "--site", "polaris"])
    assert rendered.exit_code == 0, rendered.output   # the account comes from the user's site file
    assert f"source {env}/bin/activate\n" in rendered.output and "#PBS -A PROJECT" in rendered.output
    again = CliRunner().invoke(main, ["sites", "init", "polaris", "--venv", str(env)])
    assert again.exit_code == 2 and "exists; give --force" in again.output


def test_sites_init_without_a_venv_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sites", "init", "perlmutter", "--venv", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "python -m venv --system-site-packages" in result.output
    assert not (tmp_path / "config").exists()


def test_submit_on_the_local_site_checks_the_profiler(tmp_path: Path) -> None:
    """profile.tool: nsys with no nsys at the site's path: exit 2 at submit, nothing written
    (not a 127 from the rank afterwards)."""
    data = yaml.safe_load((shipped_site_dir() / "local.yaml").read_text())
    data["paths"] = {"python": "auto", "nsys": str(tmp_path / "no" / "nsys")}
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["submit", str(REPO / "examples/command_hello.yaml"), "--site-file", str(site),
                                       "--set", "profile.tool=nsys", "--workdir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: profile.tool: nsys ({tmp_path}/no/nsys) is not on PATH here; install it, or set paths.nsys of "
        "site local to its full path")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_doctor_fails_a_cpu_only_torch_on_a_gpu_site(tmp_path: Path) -> None:
    """Polaris's nodes have 4 GPUs; a venv with torch's CPU build passed there ("none (CPU build)": ok).
    The local site has no GPUs: the same torch is fine there (test_doctor_reports_versions_of_a_working_site)."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build: no CPU build here to check")
    data = yaml.safe_load((shipped_site_dir() / "polaris.yaml").read_text())
    data["setup"] = []                                   # this Python (its torch), without Polaris's modules
    data["paths"] = {"python": sys.executable}
    site = tmp_path / "polaris-venv.yaml"
    site.write_text(yaml.safe_dump(data))
    code, rows = doctor("--site-file", str(site), "--account", "PROJECT")
    assert code == 1 and rows["torch"]["status"] == "ok"
    for check in ("cuda", "nccl"):
        assert rows[check]["status"] == "MISSING" and rows[check]["found"].startswith("none (CPU build)")
        assert "nodes have 4 GPU(s)" in rows[check]["fix"] and "CUDA build" in rows[check]["fix"]
