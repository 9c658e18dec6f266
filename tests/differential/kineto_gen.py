"""Seeded Kineto (PyTorch profiler) trace sets for the HTA differential test.

Independent of hpcprof. A set has 1-3 ranks; each rank has launches on the CPU and kernels on
1-3 streams: compute kernels, NCCL kernels, memcpy/memset, overlapping across streams;
timestamps either whole µs (int) or with fractional µs (ns resolution, float, with some
sub-µs events that HTA's rounding makes end before they start); some launches
have no kernel and some kernels have no launch (their correlation id is absent on the CPU).
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


def rank_events(rng: random.Random, ns: bool) -> list[dict[str, Any]]:
    """The events of one rank."""
    events: list[dict[str, Any]] = []
    streams = rng.sample([7, 13, 20, 24], rng.randint(1, 3))
    cpu_t = float(rng.randint(1_000_000, 2_000_000))
    gpu_free = {s: cpu_t for s in streams}
    base = rng.choice([1, 3, 10, 100])
    for corr in range(1, rng.randint(2, 60)):
        kind = rng.random()
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
        start = max(gpu_free[stream], cpu_t + launch_dur) + rng.choice([0, 0, 1, 2, 20, 50])
        dur = base + rng.randint(0, 3) + (rng.choice([0.0, 0.2, 0.5, 0.8]) if ns else 0)
        if ns and rng.random() < 0.1:                    # sub-µs events (short memsets, kernels)
            dur = rng.choice([0.2, 0.5, 0.9])
        if rng.random() > 0.05:                          # else: a launch without a kernel
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                           "ts": _t(rng, start, ns), "dur": _t(rng, dur, ns),
                           "args": {"stream": stream, "correlation": corr, "device": 0}})
        gpu_free[stream] = start + dur
        cpu_t += launch_dur + rng.choice([0, 1, 3, 30, 120])
    if rng.random() < 0.4:          # a CPU op first in the file, at any time (HTA's index 0)
        events.insert(0, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                          "ts": _t(rng, rng.uniform(events[0]["ts"], cpu_t), ns), "dur": 5})
    return events


def generate(seed: int, out: Path) -> Path:
    """Write trace set `seed` (rank<r>.json files) into directory `out` and return it."""
    rng = random.Random(seed)
    ns = rng.random() < 0.6
    ranks = rng.randint(1, 3)
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
               "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": rank_events(rng, ns)}
        (out / f"rank{rank}.json").write_text(json.dumps(doc))
    return out
