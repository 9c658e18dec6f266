"""Container launches rendered for the sites' documented command lines (golden text under
tests/golden/*container*), and the container block's bad input: one line naming the field,
exit 2, nothing written.

`REGENERATE_GOLDEN=1 pytest tests/test_container_render.py` rewrites the goldens; read the diff.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from hpcprof_cli import hpcprof

from hpcprof.config.experiment import expand
from hpcprof.config.site import SiteConfig, find_site
from hpcprof.render.job import render_point, template_dirs

GOLDEN = Path(__file__).parent / "golden"
RUN_ID = "20250101-120000-abc123"
POLARIS_DIR = "/lus/eagle/projects/datascience/hpcprof-runs/torch-app/" + RUN_ID
PERLMUTTER_DIR = "/pscratch/sd/u/user/hpcprof-runs/torch-app/" + RUN_ID


def experiment(container: dict[str, Any], tool: str = "nsys", account: str = "datascience") -> dict[str, Any]:
    return {"name": "torch-app",
            "workload": {"kind": "command", "argv": ["python3", "train.py", "--epochs", "1"]},
            "resources": {"nodes": 2, "walltime": "00:10:00", "account": account},
            "profile": {"tool": tool, "ranks": "local:0"},
            "container": container}


def job_script(exp: dict[str, Any], site: SiteConfig, run_dir: str) -> str:
    (point,) = expand(exp, site, "experiment test")
    return render_point(point, site, Path(run_dir), RUN_ID, template_dirs(site, None)).files["job.sh"]


def launch(script: str) -> list[str]:
    """The launch line split as the shell would; the wrapper as WRAPPER, "$RUN_DIR" kept."""
    (line,) = [line for line in script.splitlines()
               if '"$RUN_DIR/rank_wrapper.sh"' in line and "--hpcprof-reference" not in line]   # not the reference
    return shlex.split(line.replace('"$RUN_DIR/rank_wrapper.sh"', "WRAPPER"))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("REGENERATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with REGENERATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from its golden; REGENERATE_GOLDEN=1 rewrites it"


def test_polaris_apptainer() -> None:
    # ALCF, "Containers on Polaris" (docs.alcf.anl.gov/polaris/containers/containers/), the
    # MPI example:
    #   mpiexec -hostfile $PBS_NODEFILE -n ${PROCS} -ppn ${PPN} --depth=${DEPTH} --cpu-bind depth \
    #       --env OMP_NUM_THREADS=${NTHREADS} apptainer exec -B /opt -B /var/run/palsd/ $CONTAINER <cmd>
    # plus --nv for the GPUs (Apptainer user guide, "GPU Support": `apptainer exec --nv`).
    # The profiler is inside the image (NVIDIA's PyTorch images ship nsys), so the wrapper runs
    # in the container and the run directory is bound at its own path.
    container = {"runtime": "apptainer", "image": "/lus/eagle/projects/datascience/pytorch_24.05.sif",
                 "gpu": True, "mounts": ["/opt", "/var/run/palsd/"]}
    script = job_script(experiment(container), find_site("polaris"), POLARIS_DIR)
    check_golden("polaris_apptainer_container_job.sh", script)
    argv = launch(script)
    mpiexec = argv[:argv.index("apptainer")]
    assert mpiexec[:5] == ["mpiexec", "-n", "8", "--ppn", "4"] and "--cpu-bind" in mpiexec
    assert argv[argv.index("apptainer"):argv.index("WRAPPER") + 1] == [
        "apptainer", "exec", "--nv", "-B", "/opt", "-B", "/var/run/palsd/", "-B", "$RUN_DIR",
        "/lus/eagle/projects/datascience/pytorch_24.05.sif", "WRAPPER"]
    assert argv[argv.index("WRAPPER") + 1:] == ["python3", "train.py", "--epochs", "1"]


def test_perlmutter_podman_hpc() -> None:
    # NERSC, "Podman-HPC" (docs.nersc.gov/development/containers/podman-hpc/overview/):
    #   srun -n 2 podman-hpc run --rm --mpi -v $SCRATCH:/scratch <image> <cmd>
    #   podman-hpc run --rm --gpu <image> nvidia-smi
    # podman starts containers with a clean environment, so the rank variables go in with -e.
    container = {"runtime": "podman-hpc", "image": "registry.nersc.gov/m1234/pytorch:24.05",
                 "gpu": True, "options": ["--mpi"], "mounts": ["/global/cfs/cdirs/m1234:/data:ro"]}
    script = job_script(experiment(container, account="m1234_g"), find_site("perlmutter"), PERLMUTTER_DIR)
    check_golden("perlmutter_podman_hpc_container_job.sh", script)
    argv = launch(script)
    head = argv.index("podman-hpc")
    assert argv[0] == "srun" and argv[head:head + 4] == ["podman-hpc", "run", "--rm", "--gpu"]
    assert argv[argv.index("WRAPPER") - 2:argv.index("WRAPPER")] == [
        "--mpi", "registry.nersc.gov/m1234/pytorch:24.05"]
    assert ["-v", "/global/cfs/cdirs/m1234:/data:ro"] == argv[argv.index("-v"):argv.index("-v") + 2]
    assert "$RUN_DIR:$RUN_DIR" in argv and "SLURM_*" in argv and "HPCPROF_*" in argv


def test_perlmutter_shifter_profiler_outside() -> None:
    # NERSC, "How to use Shifter" (docs.nersc.gov/development/containers/shifter/how-to-use/):
    #   srun -n 64 shifter --image=docker:image_name:latest python3 script.py
    #   shifter --module=gpu ... (the gpu module), --volume=/global/cfs/cdirs/myproj:/data
    # Here nsys is the host's (profiler: outside): srun -> wrapper -> nsys -> shifter -> python.
    container = {"runtime": "shifter", "image": "docker:nersc/pytorch:24.05", "gpu": True,
                 "profiler": "outside", "mounts": ["/global/cfs/cdirs/m1234:/data"]}
    script = job_script(experiment(container, account="m1234_g"), find_site("perlmutter"), PERLMUTTER_DIR)
    check_golden("perlmutter_shifter_container_job.sh", script)
    argv = launch(script)
    assert argv[0] == "srun" and "shifter" not in argv[:argv.index("WRAPPER")]
    assert argv[argv.index("WRAPPER") + 1:] == [
        "shifter", "--image=docker:nersc/pytorch:24.05", "--module=gpu",
        "--volume=/global/cfs/cdirs/m1234:/data", "python3", "train.py", "--epochs", "1"]


def test_site_block_and_experiment_override() -> None:
    """The podman site's own block applies; an experiment's block replaces it."""
    site = find_site("local-podman")
    exp = experiment({"runtime": "apptainer", "image": "docker://ubuntu:24.04"}, tool="none")
    exp["resources"] = {"nodes": 1}
    del exp["container"]
    assert "podman run --rm" in job_script(exp, site, "/tmp/r")
    exp["container"] = {"runtime": "apptainer", "image": "docker://ubuntu:24.04"}
    argv = launch(job_script(exp, site, "/tmp/r"))
    assert "podman" not in argv and argv[argv.index("apptainer"):argv.index("WRAPPER")] == [
        "apptainer", "exec", "-B", "$RUN_DIR", "docker://ubuntu:24.04"]


@pytest.mark.parametrize("container, field", [
    ({"runtime": "podman", "image": "ubuntu;rm -rf ~"}, "container.image"),
    ({"runtime": "podman", "image": "ubuntu:24.04", "mounts": ["/data:/data:ro $(id)"]}, "container.mounts"),
    ({"runtime": "podman", "image": "ubuntu:24.04", "mounts": ["relative:/x"]}, "container.mounts"),
    ({"runtime": "podman", "image": "ubuntu:24.04", "options": ["--env=A=`id`"]}, "container.options"),
    ({"runtime": "docker", "image": "ubuntu:24.04"}, "container.runtime"),
    ({"runtime": "podman", "image": "ubuntu:24.04", "gpu": True}, "container.gpu"),
    ({"runtime": "apptainer", "image": "docker://ubuntu:24.04", "command": "/no/such/apptainer"},
     "container.command"),
])
def test_bad_container_input(tmp_path: Path, container: dict[str, Any], field: str) -> None:
    """One line naming the field, exit 2, no run directory (gpu: the local site has no GPUs)."""
    exp = experiment(container, tool="none")
    exp["resources"] = {"nodes": 1, "ranks_per_node": 2}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    proc = hpcprof("submit", "exp.yaml", "--site", "local", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1 and field in message and "Traceback" not in message, message
    assert not (tmp_path / "hpcprof-runs").exists()
