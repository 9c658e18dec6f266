"""Where this process sits in the job (rank, size, local rank), from the launcher, without torch.

The workloads' entries check their input against the job's ranks with this before they import
torch, so that a refused run costs no `import torch` on any rank. Works under MPI launchers (MPICH
Hydra, Open MPI, Cray PALS, `srun --mpi=pmi2|pmix`) through mpi4py, under torchrun (env://), under
plain `srun` (no MPI) and as a single process. Rank variables set by hpcprof's rank wrapper
(`HPCPROF_RANK`, `HPCPROF_LOCAL_RANK`) win over the launchers' own ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

GLOBAL_RANK_VARS = ("PALS_RANKID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK")
LOCAL_RANK_VARS = (
    "PALS_LOCAL_RANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "SLURM_LOCALID",
    "LOCAL_RANK",
)
# Variables that only an MPI launcher (or srun with an MPI plugin) sets.
MPI_MARKERS = ("PALS_RANKID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "PMI_FD", "HYDI_CONTROL_FD")


@dataclass(frozen=True)
class RankLayout:
    """Where this process sits in the job, before any process group exists."""

    rank: int
    world_size: int
    local_rank: int
    launcher: Literal["mpi", "torchrun", "srun", "single"]


def _first_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def local_rank_from_env() -> int:
    """HPCPROF_LOCAL_RANK, else the launchers' local-rank variables, else 0."""
    found = _first_int(("HPCPROF_LOCAL_RANK",) + LOCAL_RANK_VARS)
    return 0 if found is None else found


def discover_layout() -> RankLayout:
    """Rank, size and local rank of this process, from the launcher (MPI is asked when present)."""
    env = os.environ
    local_rank = local_rank_from_env()
    torchrun = "TORCHELASTIC_RUN_ID" in env and "RANK" in env and "WORLD_SIZE" in env
    if torchrun:      # a torchrun worker, also where srun/mpiexec started the agent (their PMI variables leak in)
        local = _first_int(("HPCPROF_LOCAL_RANK", "LOCAL_RANK"))
        return RankLayout(int(env["RANK"]), int(env["WORLD_SIZE"]), local or 0, "torchrun")
    if any(name in env for name in MPI_MARKERS):
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        return RankLayout(comm.Get_rank(), comm.Get_size(), local_rank, "mpi")
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:  # before RANK: the rank wrapper sets it under srun too
        return RankLayout(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), local_rank, "srun")
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        return RankLayout(int(env["RANK"]), int(env["WORLD_SIZE"]), local_rank, "torchrun")
    return RankLayout(0, 1, 0, "single")
