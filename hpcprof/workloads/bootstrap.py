"""Device choice and process-group setup shared by the workloads, on the rank layout of
`hpcprof.workloads.ranks` (torch-free, so that the entries check their input before torch loads).

Works under MPI launchers (MPICH Hydra, Open MPI, Cray PALS, `srun --mpi=pmi2|pmix`) through
mpi4py, under torchrun (env://), under plain `srun` (no MPI) and as a single process.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import platform
import re
import socket
import stat
import struct
import sys
import termios
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hpcprof.core.catalog import REFERENCE_DIR
from hpcprof.core.errors import UserError
from hpcprof.workloads.args import Backend, DeviceKind, GpuMap, in_reference_run
from hpcprof.workloads.ranks import RankLayout, discover_layout  # noqa: F401  (re-exported; torch-free)

# How long an aborting rank waits for its launcher to read its error message (see _wait_for_forward).
STDERR_FORWARD_WAIT_S = 5.0


@dataclass(frozen=True)
class Dist:
    """An initialised process group plus the device this rank computes on."""

    layout: RankLayout
    device: torch.device
    backend: str

    @property
    def rank(self) -> int:
        return self.layout.rank

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def choose_device(kind: DeviceKind, local_rank: int, gpu_map: GpuMap) -> torch.device:
    """The device of this rank: local rank modulo the visible GPUs, optionally in reverse order.

    When the site wrapper narrowed CUDA_VISIBLE_DEVICES to one GPU, this is always cuda:0.
    """
    use_cuda = torch.cuda.is_available() if kind == "auto" else kind == "cuda"
    if not use_cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError("--device cuda: torch sees no CUDA device here; run on a GPU node, or give --device cpu "
                        "(or auto)")
    count = torch.cuda.device_count()
    index = local_rank % count
    if gpu_map == "reverse":
        index = count - 1 - index
    return torch.device("cuda", index)


def free_port() -> int:
    """A TCP port that is free on this host right now (bound to port 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def first_slurm_host(nodelist: str) -> str:
    """First host of a Slurm node list: `nid[001-004,010],gpu7` -> `nid001`."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if match is None:
        raise RuntimeError(f"cannot parse Slurm node list {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _rendezvous(layout: RankLayout) -> None:
    """Set MASTER_ADDR/MASTER_PORT for env:// unless the launcher (torchrun) already did."""
    env = os.environ
    if layout.launcher == "torchrun":
        return
    if layout.launcher == "mpi":
        from mpi4py import MPI

        address = None
        if layout.rank == 0:
            address = (env.get("HPCPROF_MASTER_ADDR") or socket.gethostname(), free_port())
        host, port = MPI.COMM_WORLD.bcast(address, root=0)
    elif layout.launcher == "srun":
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or socket.gethostname()
        host = env.get("MASTER_ADDR") or first_slurm_host(nodelist)
        port = int(env.get("MASTER_PORT") or 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    else:
        host, port = "127.0.0.1", free_port()
    env["MASTER_ADDR"] = str(host)
    env["MASTER_PORT"] = str(port)


def _import_default_group_users() -> None:
    """Import, before the process group exists, the torch modules that capture it at import time.

    `torch.distributed.nn.functional` has `group=group.WORLD` default arguments, evaluated on its
    first import. torch.profiler imports it lazily on its first start (prepare_trace ->
    `hasattr(torch, "_inductor")` -> torch._inductor -> ... -> torch.distributed.nn.functional), as
    does torch.compile. Imported after init_process_group, those defaults hold the default group
    for good: destroy_process_group then cannot free it, and its gloo/NCCL worker threads are
    still running at interpreter exit. A worker that drops the last reference of a finished Work
    then needs the GIL of a finalizing interpreter, which ends the thread with a forced unwind
    through a noexcept destructor: "terminate called without an active exception", SIGABRT, after
    all output was written (the torch-profiler runs that failed under load). Imported first, the
    defaults are None (the default group at call time) and shutdown frees the group.
    """
    with contextlib.suppress(ImportError):
        import torch.distributed.nn.functional  # noqa: F401


def init_distributed(
    layout: RankLayout, backend: Backend = "auto", device_kind: DeviceKind = "auto", gpu_map: GpuMap = "identity"
) -> Dist:
    """Pick the device, rendezvous and create the default process group (NCCL on GPU, gloo on CPU)."""
    device = choose_device(device_kind, layout.local_rank, gpu_map)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    chosen = backend if backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if chosen == "nccl" and device.type != "cuda":
        raise RuntimeError("backend nccl needs a CUDA device")
    _rendezvous(layout)
    _import_default_group_users()
    kwargs: dict[str, Any] = {}
    if chosen == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=chosen, init_method="env://", rank=layout.rank, world_size=layout.world_size, **kwargs
    )
    return Dist(layout=layout, device=device, backend=chosen)


@contextlib.contextmanager
def abort_on_error(ctx: Dist) -> Iterator[None]:
    """On an exception in one rank, print it and abort the MPI job so the other ranks do not hang
    (exit code 2 for a UserError, printed as one line; 1 otherwise). The rank waits until its launcher
    has read the message before it aborts, so the user sees the cause and not only the exit code."""
    try:
        yield
    except BaseException as exc:
        if ctx.layout.launcher == "mpi" and ctx.world_size > 1:
            if isinstance(exc, UserError):
                sys.stderr.write(f"error: {exc.format_message()}\n")
            else:
                traceback.print_exc()
            sys.stderr.flush()
            _wait_for_forward(sys.stderr.fileno(), STDERR_FORWARD_WAIT_S)
            from mpi4py import MPI

            code = 2 if isinstance(exc, UserError) else 1
            MPI.COMM_WORLD.Abort(code)
            # MPI_Abort may return (MPICH 5.0.2 does once torch is loaded; its launcher kills the job after):
            # leave now, so the error is not printed a second time and no teardown waits on dead peers.
            sys.stdout.flush()
            os._exit(code)
        raise


def _wait_for_forward(fd: int, limit_s: float) -> None:
    """Wait (at most `limit_s`) until the launcher has read what this rank wrote to the pipe `fd`.

    MPI launchers forward each rank's stderr through a pipe and kill the job on MPI_Abort; bytes still
    in the pipe then are lost, and the user sees the exit code without the error (MPICH's Hydra under
    load). Does nothing where `fd` is not a pipe.
    """
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        if unread == 0:
            return
        time.sleep(0.005)


def shutdown(ctx: Dist) -> None:
    """Free what no one references (a DDP module in a reference cycle), then barrier and destroy the
    process group. Call it once the model is out of scope. A DDP module freed after the group is
    destroyed holds the group's last reference, and its C++ destructor joins gloo's threads with the
    GIL held while one of them may wait for the GIL: the rank hangs at exit
    (benchmarks/results/gloo_exit_hang.txt)."""
    gc.collect()
    if dist.is_initialized():
        if ctx.is_cuda:
            torch.cuda.synchronize(ctx.device)
        dist.barrier()
        dist.destroy_process_group()


def versions(ctx: Dist) -> dict[str, str | None]:
    """Versions of the software that shapes the numbers: Python, torch, CUDA, NCCL, MPI."""
    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        raw = torch.cuda.nccl.version()
        nccl = ".".join(str(x) for x in raw) if isinstance(raw, tuple) else str(raw)
    mpi = None
    if "mpi4py" in sys.modules:
        from mpi4py import MPI

        mpi = " ".join(MPI.Get_library_version().replace("\x00", "").splitlines()[0].split())
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if torch.cuda.is_available() else None,
        "nccl": nccl,
        "mpi": mpi,
        "backend": ctx.backend,
        "launcher": ctx.layout.launcher,
    }


def rank_info(ctx: Dist) -> dict[str, Any]:
    """This rank's identity: rank, local rank, host, device and device name."""
    name = torch.cuda.get_device_name(ctx.device) if ctx.is_cuda else platform.processor() or "cpu"
    return {
        "rank": ctx.rank,
        "local_rank": ctx.layout.local_rank,
        "host": socket.gethostname(),
        "device": str(ctx.device),
        "device_name": name,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def results_dir(override: Path | None) -> Path:
    """`--results-dir`, else `$HPCPROF_RUN_DIR/results`, else `./results`; in the job's unprofiled
    reference run (profile.reference) its `reference/` folder, apart from the profiled run's results."""
    run_dir = os.environ.get("HPCPROF_RUN_DIR")
    found = override if override is not None else Path(run_dir) / "results" if run_dir else Path("results")
    return found / REFERENCE_DIR if in_reference_run() else found


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def every_rank(flag: bool) -> bool:
    """Whether `flag` holds on every rank (each rank's answer gathered: every rank gets the same)."""
    return all(gather_objects(flag))
