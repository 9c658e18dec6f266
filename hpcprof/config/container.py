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

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not IMAGE.fullmatch(value):
            raise ValueError(f"{value!r} is not an image name: letters, digits and ._/:@+- only, "
                             "e.g. nvcr.io/nvidia/pytorch:24.05-py3 or /path/image.sif")
        return value

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
