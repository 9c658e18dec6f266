"""Probe (the ceilings below 16 MiB): NCCL all-gather and all-reduce through NCCL's own API
(hpcprof.workloads.nccl_api) on buffers from torch, cudaMalloc and ncclMemAlloc, launched one by one, captured
with torch.cuda.graph and captured with cudaStreamBeginCapture (thread-local mode, as nccl-tests); busbw per way.
Run: torchrun --nproc-per-node 2 benchmarks/gpu/nccl_graph_probe.py (2x H100 2026-11-26: results/ceilings.txt
quotes it). It leaves its graphs and buffers to the process's exit, where the run hung in teardown (killed
after its last line): hpcprof bench ceilings destroys them before the communicator."""

from __future__ import annotations

import ctypes
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from hpcprof.workloads.nccl_api import Communicator, loaded_library

ITERS = 50
CASES = [("all_gather", 1 << 20), ("all_gather", 16 << 20), ("all_gather", 64 << 20), ("all_reduce", 1 << 20),
         ("all_reduce", 16 << 20)]


def exit_on_error(kind: Any, value: Any, tb: Any) -> None:
    traceback.print_exception(kind, value, tb)
    sys.stdout.flush()
    os._exit(1)


def timed(run: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    sys.excepthook = exit_on_error
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    dist.barrier()
    lib, cudart_path = loaded_library(), loaded_library("libcudart.so")
    assert lib is not None and cudart_path is not None
    uid: list[Any] = [Communicator.unique_id(lib) if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    comm = Communicator(lib, rank, ws, uid[0])
    cudart = ctypes.CDLL(str(cudart_path))
    if rank == 0:
        print("allocator", torch.cuda.get_allocator_backend(), os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), lib,
              cudart_path, flush=True)
    keep = []

    def alloc(kind: str, nbytes: int) -> int:
        if kind == "torch":
            keep.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
            return int(keep[-1].data_ptr())
        pointer = ctypes.c_void_p()
        function = cudart.cudaMalloc if kind == "cudaMalloc" else comm.lib.ncclMemAlloc
        assert function(ctypes.byref(pointer), ctypes.c_size_t(nbytes)) == 0, kind
        return int(pointer.value or 0)

    for op, nbytes in CASES:
        factor = (ws - 1) / ws * (2 if op == "all_reduce" else 1)
        for kind in ("torch", "cudaMalloc", "ncclMemAlloc"):
            if op == "all_gather":
                send, recv, count = alloc(kind, nbytes // ws), alloc(kind, nbytes), nbytes // ws // 4
            else:
                send = recv = alloc(kind, nbytes)
                count = nbytes // 4
            call = comm.call(op, send, recv, count, "float32")
            current = torch.cuda.current_stream().cuda_stream
            for _ in range(5):
                call(current)
            one_by_one = timed(lambda call=call, current=current: [call(current) for _ in range(ITERS)]) / ITERS
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.graph(graph, stream=side):
                for _ in range(ITERS):
                    call(side.cuda_stream)
            graph.replay()
            torch_graph = timed(graph.replay) / ITERS
            # the CUDA runtime's own capture, as nccl-tests (thread-local: torch's watchdog thread keeps querying)
            raw = torch.cuda.Stream().cuda_stream
            captured, instance = ctypes.c_void_p(), ctypes.c_void_p()
            assert cudart.cudaStreamBeginCapture(ctypes.c_void_p(raw), 1) == 0
            for _ in range(ITERS):
                call(raw)
            assert cudart.cudaStreamEndCapture(ctypes.c_void_p(raw), ctypes.byref(captured)) == 0
            assert cudart.cudaGraphInstantiate(ctypes.byref(instance), captured, ctypes.c_ulonglong(0)) == 0

            def launch(instance: ctypes.c_void_p = instance, raw: int = raw) -> None:
                cudart.cudaGraphLaunch(instance, ctypes.c_void_p(raw))
                cudart.cudaStreamSynchronize(ctypes.c_void_p(raw))

            launch()
            raw_graph = timed(launch) / ITERS
            if rank == 0:
                busbw = [nbytes / t / 1e9 * factor for t in (one_by_one, torch_graph, raw_graph)]
                print(f"{op} {nbytes >> 20} MiB {kind:12s} one-by-one {busbw[0]:7.2f}  torch.cuda.graph "
                      f"{busbw[1]:7.2f}  raw capture {busbw[2]:7.2f}", flush=True)
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
