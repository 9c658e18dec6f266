"""Seeded Kineto (PyTorch profiler) trace sets for the HTA differential test.

Independent of hpcprof. A set has 1-3 ranks; each rank has launches on the CPU and kernels on
1-3 streams: compute kernels, NCCL kernels, memcpy/memset, overlapping across streams;
timestamps either whole µs (int) or with fractional µs (ns resolution, float, with some
sub-µs events that HTA's rounding makes end before they start); some launches
have no kernel and some kernels have no launch (their correlation id is absent on the CPU).
As torch.profiler writes them, files also hold events without a duration: `ac2g` flow events
between a launch and its kernel and, at the end, process/thread metadata (`ph` "M"), which make
HTA's `dur` column float64 as on every real trace. Sets with `overlap` (a third of them) run
long compute kernels on one stream while NCCL kernels run on another, as DDP's backward pass
does: real comm/compute overlap.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

KERNELS = ["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>",
           "void cutlass::Kernel<cutlass_80_tensorop>", "softmax_warp_forward"]
COMM = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"]
MEMORY = [("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", "cudaMemcpyAsync"),
          ("Memset (Device)", "gpu_memset", "cudaMemsetAsync")]


def _t(rng: random.Random, x: float, ns: bool) -> float | int:
    return round(x + rng.choice([0.0, 0.001, 0.25, 0.5, 0.5, 0.75, 0.999]), 3) if ns else int(x)


def rank_events(rng: random.Random, ns: bool, overlap: bool = False) -> list[dict[str, Any]]:
    """The events of one rank."""
    events: list[dict[str, Any]] = []
    streams = rng.sample([7, 13, 20, 24], rng.randint(2, 3) if overlap else rng.randint(1, 3))
    cpu_t = float(rng.randint(1_000_000, 2_000_000))
    gpu_free = {s: cpu_t for s in streams}
    base = rng.choice([1, 3, 10, 100])
    # correlation ids as large as real ones (HTA 0.5.0 under pandas 3 fails on a file of more
    # than 127 events whose correlation ids all fit in int8)
    first_corr = rng.randint(200, 100_000)
    for corr in range(first_corr, first_corr + rng.randint(1, 59)):
        kind = rng.random()
        if overlap:        # compute on the first stream, NCCL on the second, both long
            kind = 0.2 if rng.random() < 0.4 else 0.9
        if kind < 0.15:
            name, cat, api = rng.choice(MEMORY)
        elif kind < 0.35:
            name, cat, api = rng.choice(COMM), "kernel", "cudaLaunchKernel"
        else:
            name, cat, api = rng.choice(KERNELS), "kernel", "cudaLaunchKernel"
        launch_dur = rng.choice([1, 2, 5, 40, 60]) + rng.random() * (0.9 if ns else 0)
        if rng.random() > 0.05:                          # else: a kernel without its launch
            events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 1,
                           "ts": _t(rng, cpu_t, ns), "dur": _t(rng, launch_dur, ns),
                           "args": {"correlation": corr}})
        stream = rng.choice(streams)
        if overlap:
            stream = streams[1] if name in COMM else streams[0]
        start = max(gpu_free[stream], cpu_t + launch_dur) + rng.choice([0, 0, 1, 2, 20, 50])
        dur = base + rng.randint(0, 3) + (rng.choice([0.0, 0.2, 0.5, 0.8]) if ns else 0)
        if overlap:
            dur = dur * rng.randint(5, 40)
        if ns and rng.random() < 0.1:                    # sub-µs events (short memsets, kernels)
            dur = rng.choice([0.2, 0.5, 0.9])
        if rng.random() > 0.05:                          # else: a launch without a kernel
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                           "ts": _t(rng, start, ns), "dur": _t(rng, dur, ns),
                           "args": {"stream": stream, "correlation": corr, "device": 0}})
            if rng.random() < 0.5:                       # the launch -> kernel flow (no dur)
                events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": events[-1]["ts"],
                               "cat": "ac2g", "name": "ac2g", "bp": "e"})
        gpu_free[stream] = start + dur
        cpu_t += launch_dur + rng.choice([0, 1, 3, 30, 120])
    if rng.random() < 0.4:          # a CPU op first in the file, at any time (HTA's index 0)
        events.insert(0, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                          "ts": _t(rng, rng.uniform(events[0]["ts"], cpu_t), ns), "dur": 5})
    events += [{"name": "process_name", "ph": "M", "ts": events[0]["ts"], "pid": pid, "tid": 0,
                "args": {"name": "python" if pid == 1 else f"stream {pid}"}} for pid in (0, 1)]
    return events


def generate(seed: int, out: Path) -> Path:
    """Write trace set `seed` (rank<r>.json files) into directory `out` and return it."""
    rng = random.Random(seed)
    ns = rng.random() < 0.6
    ranks = rng.randint(1, 3)
    overlap = seed % 3 == 0
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
               "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": rank_events(rng, ns, overlap)}
        (out / f"rank{rank}.json").write_text(json.dumps(doc))
    return out
