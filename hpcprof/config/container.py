"""The `container:` block of a site or an experiment: run every rank inside an image.

Two placements of the profiler (`profiler:`):
- `inside` (default; NVIDIA's images ship nsys/ncu, as in the EKS seed): the launcher starts the
  container and the rank wrapper runs inside it: `mpiexec ... apptainer exec IMG rank_wrapper.sh CMD`;
  the run directory is bind-mounted at its own path so the wrapper and reports keep their names.
- `outside`: the wrapper (and the host's nsys/ncu) run on the host and profile the container:
  `mpiexec ... rank_wrapper.sh [nsys profile ...] podman run IMG CMD`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

#: An image reference (`registry/name:tag@sha256:...`), a `docker://` / `docker:` URI or a .sif path.
IMAGE = re.compile(r"[A-Za-z0-9/][A-Za-z0-9._/:@+\-]*")
#: A bind mount `SRC[:DST[:OPTIONS]]`, absolute paths, no characters the shell or runtime parse.
MOUNT = re.compile(r"/[A-Za-z0-9._/+\-]*(:/[A-Za-z0-9._/+\-]*(:(ro|rw))?)?")
#: One extra runtime option, e.g. `--fakeroot` or `--module=mpich`.
OPTION = re.compile(r"-[A-Za-z0-9._/:=,+\-]*")
PATH = re.compile(r"[A-Za-z0-9._/+\-]+")


def check_image(value: str) -> str:
    """An image name, URI or path made of characters no shell or YAML parser acts on."""
    if not IMAGE.fullmatch(value):
        raise ValueError(f"{value!r} is not an image name: letters, digits and ._/:@+- only, "
                         "e.g. nvcr.io/nvidia/pytorch:24.05-py3 or /path/image.sif")
    return value


class ContainerConfig(BaseModel):
    """Which runtime starts which image, with which GPU flag and bind mounts."""

    model_config = ConfigDict(extra="forbid")

    runtime: Literal["apptainer", "podman-hpc", "shifter", "podman"]
    image: str
    gpu: bool = False                 # apptainer --nv, podman-hpc --gpu, shifter --module=gpu, podman CDI
    mounts: list[str] = []            # SRC[:DST[:ro|rw]]; the run directory is added by hpcprof
    profiler: Literal["inside", "outside"] = "inside"
    command: str | None = None        # the runtime's binary (default: its name on PATH)
    options: list[str] = []           # extra runtime options, e.g. ["--fakeroot"] or ["--mpi"]

    _image = field_validator("image")(classmethod(lambda cls, v: check_image(v)))

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, values: list[str]) -> list[str]:
        for value in values:
            if not MOUNT.fullmatch(value):
                raise ValueError(f"{value!r} is not a bind mount: use /host/path[:/container/path[:ro]] "
                                 "with letters, digits and ._/+- only")
        return values

    @field_validator("options")
    @classmethod
    def _options(cls, values: list[str]) -> list[str]:
        for value in values:
            if not OPTION.fullmatch(value):
                raise ValueError(f"{value!r} is not a runtime option: start with '-', then letters, "
                                 "digits and ._/:=,+- only (e.g. --fakeroot)")
        return values

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and not PATH.fullmatch(value):
            raise ValueError(f"{value!r} is not a program path: letters, digits and ._/+- only")
        return value


#: A Kubernetes object name (DNS-1123 label) and a resource name such as nvidia.com/gpu.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
RESOURCE_NAME = re.compile(r"([a-z0-9.\-]+/)?[a-z0-9A-Z._\-]+")


class KubernetesConfig(BaseModel):
    """`scheduler: kubernetes`: a kubeflow MPIJob (v2beta1) whose launcher runs job.sh and whose
    workers host the ranks; the run directory lives on a PVC mounted at `mount_path` in every pod
    and at the same path where hpcprof submits and collects."""

    model_config = ConfigDict(extra="forbid")

    image: str                        # launcher and worker image (ships MPI, Python, nsys)
    pvc: str                          # PersistentVolumeClaim holding the hpcprof work directory
    mount_path: str                   # where the PVC is mounted (pods and the submit host)
    namespace: str = "default"
    gpu_resource: str = "nvidia.com/gpu"
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    worker_command: list[str] = ["/usr/sbin/sshd", "-De"]  # workers serve mpirun's ssh (operator v2)

    _image = field_validator("image")(classmethod(lambda cls, v: check_image(v)))

    @field_validator("pvc", "namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes name: lower-case letters, digits and '-', "
                             "at most 63, starting and ending alphanumeric")
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9._/+\-]*", value):
            raise ValueError(f"{value!r} is not an absolute path of letters, digits and ._/+-")
        return value

    @field_validator("gpu_resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        if not RESOURCE_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a resource name, e.g. nvidia.com/gpu")
        return value
