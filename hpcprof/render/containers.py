"""Container launches: the runtime's argv for a site's or experiment's `container:` block, and
where it goes in the rank launch (see hpcprof.config.container for the two placements).

Each runtime follows its site's documented command line (tests/test_container_render.py quotes
them): Apptainer on Polaris, podman-hpc and Shifter on Perlmutter, plain podman anywhere.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from hpcprof.config.container import ContainerConfig
from hpcprof.config.site import SiteConfig
from hpcprof.core.errors import UserError
from hpcprof.core.models import dump
from hpcprof.render.quoting import Raw

#: Variables podman must pass in (it starts containers with a clean environment): the
#: launchers' rank variables, torchrun's, hpcprof's own, and the usual GPU/NCCL ones.
PODMAN_ENV = ("PMI_*", "PMIX_*", "MPI_*", "HYDI_*", "PALS_*", "OMPI_*", "SLURM_*", "HPCPROF_*",
              "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
              "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_*",
              "TORCH_*", "NCCL_*", "CUDA_VISIBLE_DEVICES", "TMPDIR")
GPU_FLAGS = {"apptainer": ["--nv"], "podman-hpc": ["--gpu"], "shifter": ["--module=gpu"],
             "podman": ["--device", "nvidia.com/gpu=all"]}
RUN_DIR = '"$RUN_DIR"'


def effective_container(site: SiteConfig, experiment_container: ContainerConfig | None) -> ContainerConfig | None:
    """The experiment's container block, else the site's, else None."""
    return experiment_container or site.container


def check_container(site: SiteConfig, container: ContainerConfig) -> None:
    """Checks that need the site: GPU flags only where the site has GPUs."""
    if container.gpu and site.node.gpus == 0:
        raise UserError(f"field 'container.gpu': site {site.name} has no GPUs (node.gpus: 0); "
                        "set container.gpu: false or use a GPU site")


def runtime_argv(container: ContainerConfig, env_names: list[str], submit_dir_differs: bool) -> list[str]:
    """The runtime's tokens up to and including the image; the command follows."""
    cmd = container.command or container.runtime
    gpu = GPU_FLAGS[container.runtime] if container.gpu else []
    if container.runtime == "apptainer":
        # apptainer passes the host environment and binds $PWD; bind the run directory too.
        binds = [tok for m in container.mounts for tok in ("-B", m)]
        return [cmd, "exec", *gpu, *binds, "-B", Raw(RUN_DIR), *container.options, container.image]
    if container.runtime == "shifter":
        # shifter passes the environment and mounts $HOME/$SCRATCH/CFS: the run directory must
        # live there (it cannot bind over them).
        vols = [f"--volume={m}" for m in container.mounts]
        return [cmd, f"--image={container.image}", *gpu, *vols, *container.options]
    # podman and podman-hpc: clean environment, so pass the rank variables by name/prefix.
    mounts = [tok for m in container.mounts for tok in ("-v", m)]
    mounts += ["-v", Raw('"$RUN_DIR:$RUN_DIR"')]
    if submit_dir_differs:
        mounts += ["-v", Raw('"$PWD:$PWD"')]
    env = [tok for name in (*PODMAN_ENV, *env_names) for tok in ("-e", name)]
    return [cmd, "run", "--rm", *gpu, "--network=host", "--ipc=host", *mounts, "-w", Raw('"$PWD"'),
            *env, *container.options, container.image]


def wrap_launch(container: ContainerConfig | None, launcher: list[str], rank: list[str],
                env_names: list[str], submit_dir_differs: bool) -> tuple[list[str], list[str]]:
    """(launcher, rank argv) with the container placed: before the rank wrapper when the
    profiler is inside the image, after it (around the program only) when outside."""
    if container is None:
        return launcher, rank
    tokens = runtime_argv(container, env_names, submit_dir_differs)
    if container.profiler == "inside":
        return [*launcher, *tokens], rank
    return launcher, [*tokens, *rank]


def check_runtime_installed(container: ContainerConfig | None, field: str = "container.runtime") -> None:
    """At submit: the runtime binary is on PATH (or at `command`), and for podman the image exists
    locally (registries may be unreachable from compute nodes; `podman image exists`)."""
    if container is None:
        return
    binary = container.command or container.runtime
    found = shutil.which(binary)
    if found is None:
        where = "container.command" if container.command else field
        raise UserError(f"field '{where}': {binary!r} is not installed here (not on PATH); install "
                        f"it, load its module, or set container.command to its path")
    if container.runtime == "podman":
        import subprocess  # here: only a local podman run asks

        proc = subprocess.run([found, "image", "exists", container.image], capture_output=True, check=False)
        if proc.returncode != 0:
            raise UserError(f"field 'container.image': {container.image!r} does not exist in podman's "
                            "image store; build or pull it first (podman images lists them)")
    elif container.runtime == "apptainer" and not re.match(r"^[a-z]+://", container.image) \
            and not Path(container.image).is_file():
        raise UserError(f"field 'container.image': {container.image!r} is not a file; give a .sif path "
                        "or a docker:// URI")


def check_runtimes(site: SiteConfig, experiment_containers: list[ContainerConfig | None]) -> None:
    """At submit, before anything is written: every container the runs use can start here."""
    for container in {json.dumps(dump(c)): c for c in (effective_container(site, e)
                                                       for e in experiment_containers) if c}.values():
        check_runtime_installed(container)
