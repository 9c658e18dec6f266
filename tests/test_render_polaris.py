"""Golden-text tests of rendered job scripts and rank wrappers (Polaris PBS, Perlmutter Slurm,
local), plus the properties a Polaris user checks against the ALCF hands-on scripts.

`REGENERATE_GOLDEN=1 pytest tests/test_render_polaris.py` rewrites tests/golden/; read the diff.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpcprof.cli import main
from hpcprof.config.experiment import expand
from hpcprof.config.site import SiteConfig, find_site
from hpcprof.core.models import dump, validate
from hpcprof.render.job import RenderedRun, render_point, template_dirs

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("REGENERATE_GOLDEN") == "1"
RUN_ID = "20250101-120000-abc123"
#: The local site resolves its launcher next to this Python; goldens hold a placeholder instead.
VENV_BIN = str(Path(sys.executable).parent)


def experiment(**profile: Any) -> dict[str, Any]:
    """The ALCF hands-on as a `command` workload: 2 nodes, nsys on local rank 0 of 2 nodes."""
    return {
        "name": "seqpar-like",
        "workload": {"kind": "command", "argv": ["python", "app.py", "--precision", "bfloat16"]},
        "resources": {"nodes": 2, "walltime": "00:10:00", "account": "datascience"},
        "profile": {"tool": "nsys", "ranks": "local:0+first-nodes:2", "nsys": {"stats": True},
                    **profile},
    }


def render(exp: dict[str, Any], site: SiteConfig, run_dir: str) -> RenderedRun:
    """Render the single point of `exp` with a fixed run id and run directory."""
    (point,) = expand(exp, site, "experiment test")
    return render_point(point, site, Path(run_dir), RUN_ID, template_dirs(site, None))


def check_golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/`name` exactly (or rewrite it with REGENERATE_GOLDEN=1)."""
    path = GOLDEN / name
    text = text.replace(VENV_BIN, "<VENV_BIN>")
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with REGENERATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from its golden; REGENERATE_GOLDEN=1 rewrites it"


POLARIS_DIR = "/lus/eagle/projects/datascience/hpcprof-runs/seqpar-like/" + RUN_ID
PERLMUTTER_DIR = "/pscratch/sd/u/user/hpcprof-runs/seqpar-like/" + RUN_ID
LOCAL_DIR = "/tmp/hpcprof-runs/seqpar-like/" + RUN_ID


@pytest.fixture(scope="module")
def polaris() -> RenderedRun:
    return render(experiment(), find_site("polaris"), POLARIS_DIR)


def test_polaris_golden(polaris: RenderedRun) -> None:
    check_golden("polaris_job.sh", polaris.files["job.sh"])
    check_golden("polaris_rank_wrapper.sh", polaris.files["rank_wrapper.sh"])


def test_polaris_ncu_wrapper_golden() -> None:
    exp = experiment(tool="ncu", nsys={}, ncu={
        "set": "detailed", "kernel_name": "regex:ampere_.*gemm", "launch_skip": 10, "launch_count": 3})
    run = render(exp, find_site("polaris"), POLARIS_DIR)
    check_golden("polaris_ncu_rank_wrapper.sh", run.files["rank_wrapper.sh"])


def test_perlmutter_golden() -> None:
    exp = experiment()
    exp["resources"]["account"] = "m1234_g"
    run = render(exp, find_site("perlmutter"), PERLMUTTER_DIR)
    check_golden("perlmutter_job.sh", run.files["job.sh"])
    check_golden("perlmutter_rank_wrapper.sh", run.files["rank_wrapper.sh"])


def test_local_golden() -> None:
    exp = experiment(ranks="all")
    exp["resources"] = {"nodes": 1, "ranks_per_node": 2}
    run = render(exp, find_site("local"), LOCAL_DIR)
    check_golden("local_job.sh", run.files["job.sh"])
    check_golden("local_rank_wrapper.sh", run.files["rank_wrapper.sh"])


def directives(script: str, prefix: str) -> list[str]:
    """The directive lines of a job script, in order, up to its first non-directive line."""
    lines = script.splitlines()[1:]
    block = []
    for line in lines:
        if not line.startswith(prefix):
            break
        block.append(line.removeprefix(prefix).strip())
    return block


def test_polaris_directives_match_alcf(polaris: RenderedRun) -> None:
    """The #PBS block an ALCF user writes by hand, contiguous at the top (a comment inside it
    would end PBS's directive parsing), with a login shell."""
    job = polaris.files["job.sh"]
    assert job.startswith("#!/bin/bash -l\n")
    block = directives(job, "#PBS")
    assert block == [
        "-N seqpar-like", "-l select=2:system=polaris", "-l place=scatter", "-l walltime=00:10:00",
        "-l filesystems=home:eagle", "-q debug", "-A datascience", "-k doe", "-j oe",
        f"-o {POLARIS_DIR}/logs/job.out",
    ]
    assert not any(line.startswith("#PBS") for line in job.splitlines()[len(block) + 1:])


def launch_line(script: str) -> list[str]:
    """The launcher command of a job script, split as the shell would (variables left as text)."""
    (line,) = [line for line in script.splitlines()
               if '"$RUN_DIR/rank_wrapper.sh"' in line and "--hpcprof-reference" not in line]   # not the reference
    return shlex.split(line.replace('"$RUN_DIR/rank_wrapper.sh"', "WRAPPER"))


def test_polaris_mpiexec_line(polaris: RenderedRun) -> None:
    """PALS mpiexec as in the ALCF docs: 8 ranks, 4 per node, depth binding, TMPDIR passed; the
    binary is PALS's `mpiexec` from the compute node's PATH, not a path from the render host."""
    argv = launch_line(polaris.files["job.sh"])
    assert argv == ["mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth",
                    "--env", "TMPDIR=$TMPDIR", "-l", "--line-buffer", "WRAPPER",
                    "python", "app.py", "--precision", "bfloat16"]
    job = polaris.files["job.sh"]
    assert 'export TMPDIR="$RUN_DIR/tmp"' in job
    assert "export NCCL_NET='AWS Libfabric'" in job
    setup = job.index("module load conda")
    assert setup < job.index("set -u") < job.index("mpiexec"), "set -u must follow the site setup"


def test_polaris_wrapper_affinity_and_output(polaris: RenderedRun) -> None:
    """GPU 3-r for local rank r; nsys on local rank 0 with rank < 8 (the seed's PROFRANK=0,
    RANKCUTOFF=8); one report per resolved rank under profiles/nsys."""
    wrapper = polaris.files["rank_wrapper.sh"]
    assert "export CUDA_VISIBLE_DEVICES=$(( 4 - 1 - hp_local_rank % 4 ))" in wrapper
    assert re.search(r'if \[ "\$hp_profiled" = 1 \] && \{ \[ "\$hp_local_rank" -eq 0 \]; \} && '
                     r'\{ \[ "\$hp_rank" -lt 8 \]; \}; then', wrapper)   # not the unprofiled reference run
    # hpcprof's default traces: CUDA and NVTX, no CPU sampling or context switches (the seed's osrt is
    # opt-in: profile.nsys.trace)
    (nsys,) = [line.strip() for line in wrapper.splitlines() if line.strip().startswith("exec nsys")]
    assert shlex.split(nsys) == [
        "exec", "nsys", "profile", "--trace=cuda,nvtx", "--capture-range=none", "--stats=true",
        "--sample=none", "--cpuctxsw=none", "--export=sqlite", "--force-overwrite=true", "-o", "$HPCPROF_PROFILE_DIR/rank${hp_rank}", "$@"]


def test_perlmutter_directives() -> None:
    """NERSC's shape: -A m…_g, -C gpu, --qos regular, GPUs per node, 32 CPUs per task, the forensics'
    walltime warning, srun with --mpi=pmi2 and core binding, MASTER_ADDR from scontrol."""
    exp = experiment()
    exp["resources"]["account"] = "m1234_g"
    job = render(exp, find_site("perlmutter"), PERLMUTTER_DIR).files["job.sh"]
    assert directives(job, "#SBATCH") == [
        "--job-name=seqpar-like", "--nodes=2", "--ntasks-per-node=4", "--time=00:10:00",
        "--qos=regular", "--account=m1234_g", "--constraint=gpu", "--gpus-per-node=4",
        "--cpus-per-task=32", "--signal=B:USR1@120", f"--output={PERLMUTTER_DIR}/logs/job.out", "--gpu-bind=none"]
    assert launch_line(job)[:10] == ["srun", "-N", "2", "-n", "8", "--ntasks-per-node", "4",
                                     "--kill-on-bad-exit=1", "--mpi=pmi2", "-c"]
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in job


def test_pbs_extra_options_with_spaces() -> None:
    """A site's `pbs_options: ["-r y"]` (rerunnable, preemptable queue) renders as `#PBS -r y`."""
    data = dump(find_site("polaris"))
    data["pbs_options"] = ["-r y"]
    job = render(experiment(), validate(SiteConfig, data, "test site"), POLARIS_DIR).files["job.sh"]
    assert directives(job, "#PBS")[-1] == "-r y"


def test_done_when_command(tmp_path: Path) -> None:
    """The Polaris example's command: `hpcprof render examples/seqpar_polaris.yaml --site polaris
    --set resources.nodes=2 --set profile.tool=nsys --set profile.ranks=local:0 -o DIR` writes one
    PBS script and wrapper per sweep point (float32, bfloat16)."""
    example = Path(__file__).parents[1] / "examples" / "seqpar_polaris.yaml"
    result = CliRunner().invoke(main, [
        "render", str(example), "--site", "polaris", "--set", "resources.account=PROJECT", "--set", "resources.nodes=2",
        "--set", "profile.tool=nsys", "--set", "profile.ranks=local:0", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for index, precision in enumerate(["float32", "bfloat16"]):
        job = (tmp_path / f"p{index:03d}" / "job.sh").read_text()
        wrapper = (tmp_path / f"p{index:03d}" / "rank_wrapper.sh").read_text()
        assert "-l select=2:system=polaris" in directives(job, "#PBS")
        argv = launch_line(job)
        assert argv[:argv.index("WRAPPER")] == [
            "mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth", "--env",
            "TMPDIR=$TMPDIR", "-l", "--line-buffer"]
        assert argv[argv.index("WRAPPER") + 1:][-2:] == ["--precision", precision]
        # nsys's unprofiled reference run (profile.reference) first: its ranks are not profiled
        assert 'if [ "$hp_profiled" = 1 ] && { [ "$hp_local_rank" -eq 0 ]; }; then' in wrapper
        assert 'exec nsys profile' in wrapper and '"$RUN_DIR/rank_wrapper.sh" --hpcprof-reference ' in job


@pytest.mark.parametrize(("kind", "flavor", "bind", "expected"), [
    ("mpiexec", "pals", "depth", ["--depth=8", "--cpu-bind", "depth"]),
    ("mpiexec", "hydra", "depth", ["-bind-to", "core:8"]),
    ("mpiexec", "openmpi", "depth", ["--map-by", "ppr:4:node:PE=8", "--bind-to", "core"]),
    ("srun", None, "depth", ["-c", "8", "--cpu-bind=cores"]),
    ("mpiexec", "openmpi", "numa", ["--bind-to", "numa"]),
    ("mpiexec", "hydra", "cores", ["-bind-to", "core"]),
    ("srun", None, "socket", ["--cpu-bind=sockets"]),
    ("mpiexec", "pals", "list:0-7:8-15:16-23:24-31", ["--cpu-bind", "list:0-7:8-15:16-23:24-31"]),
    ("srun", None, "map_cpu:0,8,16,24", ["--cpu-bind=map_cpu:0,8,16,24"]),
])
def test_cpu_binding_in_each_launchers_words(kind: str, flavor: str | None, bind: str, expected: list[str]) -> None:
    """The site's `binding.cpu_bind` is translated per launcher (Open MPI rejects `--bind-to depth`)."""
    data = dump(find_site("polaris"))
    data["launcher"] = {"kind": kind, "flavor": flavor} if flavor else {"kind": kind}
    data["scheduler"] = "slurm" if kind == "srun" else "pbs"
    data["binding"] = {"depth": 8, "cpu_bind": bind}
    line = launch_line(render(experiment(), validate(SiteConfig, data, "test site"), POLARIS_DIR).files["job.sh"])
    at = next(i for i in range(len(line)) if line[i:i + len(expected)] == expected)
    assert at > 0


@pytest.mark.parametrize(("flavor", "bind"), [("openmpi", "list:0-7"), ("hydra", "map_cpu:0,8"), ("openmpi", "bogus")])
def test_a_binding_the_launcher_does_not_take_is_one_line(flavor: str, bind: str, tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"name: mine\nscheduler: local\nlauncher: {{kind: mpiexec, flavor: {flavor}}}\n"
                    f"node: {{cores: 8}}\nbinding: {{depth: 2, cpu_bind: '{bind}'}}\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: x\nworkload: {kind: command, argv: ['true']}\n")
    res = CliRunner().invoke(main, ["render", str(exp), "--site-file", str(site)])
    assert res.exit_code == 2
    assert f"binding.cpu_bind: {bind!r} is not a binding the {flavor} launcher takes" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_the_render_sweep_benchmark_fits_polaris_queues() -> None:
    """benchmarks/render_sweep.py's sweep (nodes 1-10, walltimes under an hour) is one Polaris takes
    (its debug-scaling queue): the benchmark had failed unnoticed once the site listed its queues."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "render_sweep.py"), "--points", "100"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("site polaris: 100 points validated + rendered in "), done.stdout
