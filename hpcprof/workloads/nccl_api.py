"""NCCL's own C API and the CUDA runtime's stream capture, called through ctypes on the libnccl and
libcudart this process already loaded (torch's): the collectives of `hpcprof bench ceilings` run as
NVIDIA's nccl-tests runs them, without torch.distributed's per-call host work in between (below
16 MiB that work, not the link, set the ceiling), on buffers from NCCL's allocator (ncclMemAlloc,
which lets NCCL register them when the calls are captured in a CUDA graph), captured with
cudaStreamBeginCapture (torch.cuda.graph's capture of the same calls ran 5-32 % slower on 2x H100).
Declarations from nccl.h (NCCL 2.19+) and cuda_runtime_api.h."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

#: nccl.h's ncclDataType_t of each dtype `bench ceilings` times
DATA_TYPES = {"float32": 7, "tf32": 7, "float16": 6, "bfloat16": 9}
NCCL_SUM = 0
_P, _N, _I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_char * 128)]


#: name -> argument types (the result is ncclResult_t: int, 0 = ncclSuccess)
SIGNATURES: dict[str, list[type]] = {
    "ncclGetUniqueId": [_P],
    "ncclCommInitRank": [_P, _I, UniqueId, _I],
    "ncclCommDestroy": [_P],
    "ncclAllGather": [_P, _P, _N, _I, _P, _P],
    "ncclReduceScatter": [_P, _P, _N, _I, _I, _P, _P],
    "ncclAllReduce": [_P, _P, _N, _I, _I, _P, _P],
    "ncclMemAlloc": [_P, _N],
    "ncclMemFree": [_P],
}
#: NCCL 2.27+: a buffer registered as a symmetric window on every rank (NCCL's low-latency kernels)
WINDOWS: dict[str, list[type]] = {
    "ncclCommWindowRegister": [_P, _P, _N, _P, _I],
    "ncclCommWindowDeregister": [_P, _P],
}
NCCL_WIN_COLL_SYMMETRIC = 1
#: the CUDA runtime's calls a captured graph needs (cudaError_t: int, 0 = cudaSuccess)
RUNTIME: dict[str, list[type]] = {
    "cudaStreamBeginCapture": [_P, _I],
    "cudaStreamEndCapture": [_P, _P],
    "cudaGraphInstantiate": [_P, _P, ctypes.c_ulonglong],
    "cudaGraphLaunch": [_P, _P],
    "cudaGraphExecDestroy": [_P],
    "cudaGraphDestroy": [_P],
}
#: cudaStreamCaptureModeThreadLocal: other threads' CUDA calls (torch's watchdog) stay allowed
CAPTURE_THREAD_LOCAL = 1


class NcclError(RuntimeError):
    """An NCCL call returned an error."""


def loaded_library(prefix: str = "libnccl.so", maps: Path = Path("/proc/self/maps")) -> Path | None:
    """The shared object whose file name starts with `prefix` mapped into this process (torch loads libnccl
    and libcudart); None where none is (a CPU run, a torch with NCCL linked in statically, no /proc)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith(prefix):
            return Path(path)
    return None


class Communicator:
    """One NCCL communicator over the job's ranks, and its three collectives on a CUDA stream."""

    def __init__(self, library: Path, rank: int, world_size: int, unique_id: bytes) -> None:
        self.lib = ctypes.CDLL(str(library))
        for name, argtypes in SIGNATURES.items():
            function = getattr(self.lib, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        self.lib.ncclGetErrorString.argtypes, self.lib.ncclGetErrorString.restype = [_I], ctypes.c_char_p
        #: whether this NCCL registers symmetric windows (2.27+)
        self.has_windows = all(hasattr(self.lib, name) for name in WINDOWS)
        for name, argtypes in WINDOWS.items() if self.has_windows else ():
            function = getattr(self.lib, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        self.comm = ctypes.c_void_p()
        self.check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), world_size,
                                             UniqueId.from_buffer_copy(unique_id), rank))

    @staticmethod
    def unique_id(library: Path) -> bytes:
        """A new ncclUniqueId (rank 0 makes it; every rank passes it to the constructor)."""
        lib = ctypes.CDLL(str(library))
        made = UniqueId()
        result = lib.ncclGetUniqueId(ctypes.byref(made))
        if result:
            raise NcclError(f"ncclGetUniqueId returned {result}")
        return bytes(made)

    def check(self, result: int) -> None:
        if result:
            raise NcclError(f"NCCL error {result}: {self.lib.ncclGetErrorString(result).decode()}")

    def call(self, op: str, send: int, recv: int, count: int, dtype: str) -> Callable[[int], None]:
        """A call of `op` on device pointers, given the CUDA stream: all_gather (count: each rank's part,
        out of place), reduce_scatter (count: each rank's part of the result, out of place), all_reduce
        (count: the buffer's elements; in place where send == recv), summing."""
        kind, comm, check = DATA_TYPES[dtype], self.comm, self.check
        if op == "all_gather":
            gather = self.lib.ncclAllGather
            return lambda stream: check(gather(send, recv, count, kind, comm, stream))
        function = self.lib.ncclReduceScatter if op == "reduce_scatter" else self.lib.ncclAllReduce
        return lambda stream: check(function(send, recv, count, kind, NCCL_SUM, comm, stream))

    def alloc(self, nbytes: int) -> int:
        """A device buffer of `nbytes` from NCCL's allocator (contents undefined: a collective's time does not
        depend on them); give it back with free."""
        pointer = ctypes.c_void_p()
        self.check(self.lib.ncclMemAlloc(ctypes.byref(pointer), nbytes))
        return int(pointer.value or 0)

    def free(self, pointer: int) -> None:
        self.check(self.lib.ncclMemFree(pointer))

    def register_window(self, pointer: int, nbytes: int) -> int:
        """Register an ncclMemAlloc buffer as a symmetric window (every rank at once, the same size); the
        window's handle, for deregister_window."""
        window = ctypes.c_void_p()
        self.check(self.lib.ncclCommWindowRegister(self.comm, pointer, nbytes, ctypes.byref(window),
                                                   NCCL_WIN_COLL_SYMMETRIC))
        return int(window.value or 0)

    def deregister_window(self, window: int) -> None:
        self.check(self.lib.ncclCommWindowDeregister(self.comm, window))

    def close(self) -> None:
        self.check(self.lib.ncclCommDestroy(self.comm))


class CapturedGraph:
    """`iters` calls captured on `stream` into one CUDA graph and instantiated, as nccl-tests' `-G` does."""

    def __init__(self, library: Path, call: Callable[[int], None], iters: int, stream: int) -> None:
        self.rt = ctypes.CDLL(str(library))
        for name, argtypes in RUNTIME.items():
            function = getattr(self.rt, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
        self.check("cudaStreamBeginCapture", self.rt.cudaStreamBeginCapture(stream, CAPTURE_THREAD_LOCAL))
        try:
            for _ in range(iters):
                call(stream)
        finally:
            self.check("cudaStreamEndCapture", self.rt.cudaStreamEndCapture(stream, ctypes.byref(self.graph)))
        self.check("cudaGraphInstantiate", self.rt.cudaGraphInstantiate(ctypes.byref(self.exec), self.graph, 0))

    @staticmethod
    def check(name: str, result: int) -> None:
        if result:
            raise NcclError(f"{name} returned CUDA error {result}")

    def launch(self, stream: int) -> None:
        self.check("cudaGraphLaunch", self.rt.cudaGraphLaunch(self.exec, stream))

    def close(self) -> None:
        if self.exec:
            self.check("cudaGraphExecDestroy", self.rt.cudaGraphExecDestroy(self.exec))
        if self.graph:
            self.check("cudaGraphDestroy", self.rt.cudaGraphDestroy(self.graph))
