"""Job-start checks: every rendered job checks, before any rank starts, that the ranks' Python
imports hpcprof, that the requested profiler is on PATH (printing its version) and that an NCCL
network plugin is on LD_LIBRARY_PATH when NCCL_NET names one; each failure is one line naming the
fix, exit 3, and the run's reason says it. The jobs are rendered by `hpcprof render -o` and run with
bash as a user would run them by hand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import hpcprof
from hpcprof.campaign.jobstate import reconcile
from hpcprof.cli import main
from hpcprof.config.site import shipped_site_dir
from hpcprof.run.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def outside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def local_site(tmp_path: Path, **changes: object) -> Path:
    """The shipped local site with `changes` (top-level keys) written to a site file."""
    data = yaml.safe_load((shipped_site_dir() / "local.yaml").read_text())
    data.update(changes)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def render(experiment: Path, site_file: Path, out: Path, *sets: str) -> Path:
    """`hpcprof render -o OUT` (from the test's directory: the ranks start there, not in the repository)."""
    args = ["render", str(experiment), "--site-file", str(site_file), "-o", str(out)]
    for value in sets:
        args += ["--set", value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


def run_job(run_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the rendered job.sh with bash, without PYTHONPATH (so hpcprof is importable only where
    it is installed), from the repository's parent (so `python -c` finds no hpcprof in the cwd)."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (env or {})
    return subprocess.run(["bash", str(run_dir / "job.sh")], capture_output=True, text=True, timeout=120,
                          env=clean, cwd=REPO.parent, check=False)


def failed_check(result: subprocess.CompletedProcess[str]) -> str:
    """The single check line of a job that stopped at its checks (exit 3, nothing else on stderr)."""
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hpcprof: job-start check failed: ")
    return lines[0]


def test_rendered_jobs_contain_the_checks(tmp_path: Path) -> None:
    out = render(REPO / "examples/seqpar_polaris.yaml", shipped_site_dir() / "polaris.yaml", tmp_path / "r",
                 "resources.account=PROJECT")
    job = (out / "p000" / "job.sh").read_text()
    checks = job.index("# ---- job-start checks")
    assert "python -c 'import sys, hpcprof, hpcprof.config;" in job
    assert "hp_tool=$(command -v nsys)" in job and '"$hp_tool" --version' in job
    assert "libnccl-net*.so" in job
    assert checks < job.index('"$RUN_DIR/rank_wrapper.sh"'), "the checks run before the launcher"


def test_python_without_hpcprof_fails_in_one_line(tmp_path: Path) -> None:
    """A venv without hpcprof as the site's Python: the job stops before the launcher."""
    bare = tmp_path / "bare-venv"
    venv.EnvBuilder(with_pip=False).create(bare)
    site = local_site(tmp_path, paths={"python": str(bare / "bin" / "python")})
    out = render(REPO / "examples/seqpar_cpu.yaml", site, tmp_path / "run")
    line = failed_check(run_job(out))
    assert f"{bare}/bin/python (the Python of the ranks) cannot import hpcprof " \
           "(ModuleNotFoundError: No module named 'hpcprof'): install hpcprof" in line
    assert "hpcprof sites init local --venv DIR" in line
    run = RunDir(out)
    assert reconcile(run, None).state == "FAILED" and "cannot import hpcprof" in reconcile(run, None).reason
    assert not list((out / "logs").glob("rank*.log")), "no rank started"


@pytest.mark.slow
def test_python_with_hpcprof_passes_and_says_what_it_found(tmp_path: Path) -> None:
    """The same check passes where hpcprof is importable (PYTHONPATH as the test runs it) and
    prints the version and place it found; the ranks then run."""
    site = local_site(tmp_path, paths={"python": sys.executable})
    out = render(REPO / "examples/seqpar_cpu.yaml", site, tmp_path / "run", "workload.args.iterations=2")
    result = run_job(out, {"PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout + result.stderr
    job_log = result.stdout
    assert f"hpcprof: hpcprof {hpcprof.__version__} ({REPO}/hpcprof/__init__.py), Python" in job_log


def test_missing_profiler_fails_in_one_line(tmp_path: Path) -> None:
    site = local_site(tmp_path, paths={"python": sys.executable, "nsys": str(tmp_path / "no" / "nsys")})
    out = render(REPO / "examples/seqpar_cpu.yaml", site, tmp_path / "run", "profile.tool=nsys")
    line = failed_check(run_job(out, {"PYTHONPATH": str(REPO)}))
    assert f"nsys ({tmp_path}/no/nsys) is not on PATH" in line and "set paths.nsys" in line


NSYS = shutil.which("nsys") or "/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"


@pytest.mark.slow   # nsys
@pytest.mark.skipif(not os.access(NSYS, os.X_OK), reason="nsys not installed here (tests/services installs it)")
def test_profiler_version_is_printed(tmp_path: Path) -> None:
    """nsys on the site's path: the job prints its version line (nsys's own --version) and path
    before the ranks start (the launcher here is /bin/true: only the checks run)."""
    version = subprocess.run([NSYS, "--version"], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    site = local_site(tmp_path, paths={"python": sys.executable, "nsys": NSYS},
                      launcher={"kind": "mpiexec", "flavor": "hydra", "command": "/bin/true"})
    out = render(REPO / "examples/command_hello.yaml", site, tmp_path / "run", "profile.tool=nsys")
    result = run_job(out)
    assert result.returncode == 0, result.stderr
    assert f"hpcprof: nsys {version} ({NSYS})" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("with_plugin", [False, True])
def test_nccl_net_needs_its_plugin(tmp_path: Path, with_plugin: bool) -> None:
    """NCCL_NET='AWS Libfabric' (Polaris's env) without libnccl-net*.so on LD_LIBRARY_PATH stops
    the job naming the plugin directory; with it, the job goes on and says which plugin it found."""
    plugin_dir = tmp_path / "aws-ofi-nccl" / "lib"
    plugin_dir.mkdir(parents=True)
    if with_plugin:
        (plugin_dir / "libnccl-net.so").write_bytes(b"\x7fELF")
    site = local_site(tmp_path, env={"NCCL_NET": "AWS Libfabric", "OMP_NUM_THREADS": "1"},
                      setup=[f"export LD_LIBRARY_PATH={plugin_dir}:${{LD_LIBRARY_PATH:-}}"])
    out = render(REPO / "examples/command_hello.yaml", site, tmp_path / "run")
    result = run_job(out)
    if with_plugin:
        assert result.returncode == 0, result.stderr
        assert f"hpcprof: NCCL_NET=AWS Libfabric uses {plugin_dir}/libnccl-net.so" in result.stdout
    else:
        line = failed_check(result)
        assert "NCCL_NET=AWS Libfabric needs an NCCL network plugin (libnccl-net*.so) on LD_LIBRARY_PATH" in line
        assert "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib" in line


def test_polaris_job_puts_the_plugin_on_the_library_path(tmp_path: Path) -> None:
    """Polaris sets NCCL_NET='AWS Libfabric': its job puts ALCF's aws-ofi-nccl plugin and hwloc on
    LD_LIBRARY_PATH (site setup) before the environment and the checks (ALCF's NCCL page)."""
    out = render(REPO / "examples/seqpar_polaris.yaml", shipped_site_dir() / "polaris.yaml", tmp_path / "r",
                 "resources.account=PROJECT")
    job = (out / "p000" / "job.sh").read_text()
    plugin = job.index("export LD_LIBRARY_PATH=/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:${LD_LIBRARY_PATH:-}\n")
    hwloc = job.index("export LD_LIBRARY_PATH=/soft/libraries/hwloc/lib/:$LD_LIBRARY_PATH\n")
    net = job.index("export NCCL_NET='AWS Libfabric'\n")
    assert plugin < hwloc < net < job.index("# ---- job-start checks")
    for name, value in (("NCCL_NET_GDR_LEVEL", "PHB"), ("NCCL_CROSS_NIC", "1"), ("NCCL_COLLNET_ENABLE", "1"),
                        ("FI_CXI_DISABLE_HOST_REGISTER", "1"), ("FI_MR_CACHE_MONITOR", "userfaultfd"),
                        ("FI_CXI_DEFAULT_CQ_SIZE", "131072")):
        assert f"export {name}={value}\n" in job


@pytest.mark.parametrize("site", sorted(p.stem for p in shipped_site_dir().glob("*.yaml")))
def test_every_shipped_site_that_names_a_plugin_loads_one(site: str) -> None:
    """A shipped site whose env sets NCCL_NET to a plugin puts a plugin directory on LD_LIBRARY_PATH."""
    data = yaml.safe_load((shipped_site_dir() / f"{site}.yaml").read_text())
    net = (data.get("env") or {}).get("NCCL_NET")
    if net not in (None, "IB", "Socket"):
        assert any("LD_LIBRARY_PATH=" in line and "nccl" in line for line in data.get("setup", [])), site


def test_perlmutter_reverses_the_gpu_order(tmp_path: Path) -> None:
    """Local rank r -> GPU 3-r with all GPUs visible (--gpu-bind=none), as NERSC's scripts do."""
    out = render(REPO / "examples/seqpar_polaris.yaml", shipped_site_dir() / "perlmutter.yaml", tmp_path / "r",
                 "resources.account=m1234_g")
    wrapper = (out / "p000" / "rank_wrapper.sh").read_text()
    job = (out / "p000" / "job.sh").read_text()
    assert "export CUDA_VISIBLE_DEVICES=$(( 4 - 1 - hp_local_rank % 4 ))" in wrapper
    assert "#SBATCH --gpu-bind=none" in job and "--cpu-bind=cores" in job and "-c 32" in job
