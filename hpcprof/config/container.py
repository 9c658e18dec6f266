"""The `container:` block of a site or an experiment: run every rank inside an image.

Two placements of the profiler (`profiler:`):
- `inside` (default; NVIDIA's images ship nsys/ncu, as in the EKS seed): the launcher starts the
  container and the rank wrapper runs inside it: `mpiexec ... apptainer exec IMG rank_wrapper.sh CMD`;
  the run directory is bind-mounted at its own path so the wrapper and reports keep their names.
- `outside`: the wrapper (and the host's nsys/ncu) run on the host and profile the container:
  `mpiexec ... rank_wrapper.sh [nsys profile ...] podman run IMG CMD`.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from hpcprof.core.models import Model, matching, run_checks

#: An image reference (`registry/name:tag@sha256:...`), a `docker://` / `docker:` URI or a .sif path.
check_image = matching(r"[A-Za-z0-9/][A-Za-z0-9._/:@+\-]*", "an image name: letters, digits and ._/:@+- only, "
                       "e.g. nvcr.io/nvidia/pytorch:24.05-py3 or /path/image.sif")
#: A bind mount `SRC[:DST[:OPTIONS]]`, absolute paths, no characters the shell or runtime parse.
check_mounts = matching(r"/[A-Za-z0-9._/+\-]*(:/[A-Za-z0-9._/+\-]*(:(ro|rw))?)?", "a bind mount: use "
                        "/host/path[:/container/path[:ro]] with letters, digits and ._/+- only")
#: One extra runtime option, e.g. `--fakeroot` or `--module=mpich`.
check_runtime_options = matching(r"-[A-Za-z0-9._/:=,+\-]*", "a runtime option: start with '-', then "
                                 "letters, digits and ._/:=,+- only (e.g. --fakeroot)")
check_program = matching(r"[A-Za-z0-9._/+\-]+", "a program path: letters, digits and ._/+- only")
check_absolute = matching(r"/[A-Za-z0-9._/+\-]*", "an absolute path of letters, digits and ._/+-")
#: A Kubernetes object name (DNS-1123 label) and a resource name such as nvidia.com/gpu.
check_kubernetes_name = matching(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a Kubernetes name: lower-case letters, "
                                 "digits and '-', at most 63, starting and ending alphanumeric")
check_resource = matching(r"([a-z0-9.\-]+/)?[a-z0-9A-Z._\-]+", "a resource name, e.g. nvidia.com/gpu")


class ContainerConfig(Model):
    """Which runtime starts which image, with which GPU flag and bind mounts."""

    runtime: Literal["apptainer", "podman-hpc", "shifter", "podman"]
    image: str
    gpu: bool = False                 # apptainer --nv, podman-hpc --gpu, shifter --module=gpu, podman CDI
    mounts: list[str] = []            # SRC[:DST[:ro|rw]]; the run directory is added by hpcprof
    profiler: Literal["inside", "outside"] = "inside"
    command: str | None = None        # the runtime's binary (default: its name on PATH)
    options: list[str] = []           # extra runtime options, e.g. ["--fakeroot"] or ["--mpi"]

    def __post_init__(self) -> None:
        run_checks(self, {"image": check_image, "mounts": check_mounts, "command": check_program,
                          "options": check_runtime_options})


class KubernetesConfig(Model):
    """`scheduler: kubernetes`: a kubeflow MPIJob (v2beta1) whose launcher runs job.sh and whose
    workers host the ranks; the run directory lives on a PVC mounted at `mount_path` in every pod
    and at the same path where hpcprof submits and collects."""

    image: str                        # launcher and worker image (ships MPI, Python, nsys)
    pvc: str                          # PersistentVolumeClaim holding the hpcprof work directory
    mount_path: str                   # where the PVC is mounted (pods and the submit host)
    namespace: str = "default"
    gpu_resource: str = "nvidia.com/gpu"
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    # workers serve mpirun's ssh (operator v2)
    worker_command: list[str] = msgspec.field(default_factory=lambda: ["/usr/sbin/sshd", "-De"])

    def __post_init__(self) -> None:
        run_checks(self, {"image": check_image, "pvc": check_kubernetes_name, "mount_path": check_absolute,
                          "namespace": check_kubernetes_name, "gpu_resource": check_resource})
