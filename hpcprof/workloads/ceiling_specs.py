"""What `hpcprof bench ceilings` measures, without torch: the GEMM and collective specs, their
parsing (`M,N,K[:dtype]`, `OP:BYTES[:dtype]`), nccl-tests' bus-bandwidth factors and each
workload's default sizes. Rendering (the `ceilings:` experiment option) builds the job's command
line from here on a login node, where torch may not import.

Sizes follow nccl-tests (doc/PERFORMANCE.md): BYTES is the full output of an all-gather, the full
input of a reduce-scatter, the buffer of an all-reduce; `K`, `M`, `G` are powers of 1024 as
nccl-tests' `-b`/`-e` read them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: GEMM precisions: float32 with TF32 off, float32 with TF32 on, and the 16-bit types
GEMM_DTYPES = ("float32", "tf32", "bfloat16", "float16")
#: collective element types, with their bytes
COLLECTIVE_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
GEMM_BYTES = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2}
#: collectives and nccl-tests' bus-bandwidth factor of each for n ranks (doc/PERFORMANCE.md, Summary)
BUS_FACTORS = {
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n,
}
#: largest GEMM dimension and message accepted (a typo, not a size)
MAX_DIM = 1 << 20
MAX_BYTES = 1 << 40
#: the default sweep of a workload without known sizes: 1 MiB .. 256 MiB, x4
DEFAULT_BYTES = tuple(1 << s for s in range(20, 29, 2))
DEFAULT_GEMM = 8192
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class GemmSpec:
    """One matmul C[m,n] = A[m,k] @ B[k,n] in `dtype`."""

    m: int
    n: int
    k: int
    dtype: str

    def text(self) -> str:
        return f"{self.m},{self.n},{self.k}:{self.dtype}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective over all ranks of `nbytes` (nccl-tests' size) in `dtype`."""

    op: str
    nbytes: int
    dtype: str

    def text(self) -> str:
        return f"{self.op}:{self.nbytes}:{self.dtype}"


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw for `op` over `world_size` ranks."""
    return float(BUS_FACTORS[op](world_size))


def parse_bytes(text: str) -> int:
    """`1048576`, `1M`, `64MiB`, `2G` -> bytes (powers of 1024); ValueError otherwise."""
    match = re.fullmatch(r"(\d{1,15})\s*([KMG]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if match is None:
        raise ValueError(f"size {text!r} is not a byte count (e.g. 1048576, 64M, 1G)")
    return int(match.group(1)) * UNITS[match.group(2).upper()]


def parse_gemm(text: str, default_dtype: str = "bfloat16") -> GemmSpec:
    """`M,N,K[:dtype]` -> GemmSpec; ValueError saying what is wrong otherwise."""
    dims, _, dtype = text.partition(":")
    dtype = dtype.strip() or default_dtype
    parts = [p.strip() for p in dims.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError("expected M,N,K[:dtype] with positive integers, e.g. 8192,8192,8192:bfloat16")
    m, n, k = (int(p) for p in parts)
    if not all(0 < d <= MAX_DIM for d in (m, n, k)):
        raise ValueError(f"each of M, N, K must be in 1..{MAX_DIM}")
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(GEMM_DTYPES)}")
    return GemmSpec(m, n, k, dtype)


def parse_collective(text: str, default_dtype: str = "float32") -> CollectiveSpec:
    """`OP:BYTES[:dtype]` -> CollectiveSpec; ValueError saying what is wrong otherwise."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError("expected OP:BYTES[:dtype], e.g. all_gather:64M:bfloat16")
    op = parts[0].strip().replace("-", "_")
    if op not in BUS_FACTORS:
        raise ValueError(f"op {op!r} is not one of {', '.join(BUS_FACTORS)}")
    nbytes = parse_bytes(parts[1])
    dtype = parts[2].strip() if len(parts) == 3 and parts[2].strip() else default_dtype
    if dtype not in COLLECTIVE_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(COLLECTIVE_DTYPES)}")
    if not 0 < nbytes <= MAX_BYTES:
        raise ValueError(f"BYTES must be in 1..{MAX_BYTES}")
    return CollectiveSpec(op, nbytes, dtype)


def check_fits(spec: CollectiveSpec, world_size: int) -> None:
    """BYTES splits into whole elements per rank (nccl-tests' count/nranks); ValueError otherwise."""
    unit = COLLECTIVE_DTYPES[spec.dtype] * (1 if spec.op == "all_reduce" else world_size)
    if spec.nbytes % unit:
        raise ValueError(f"{spec.nbytes} bytes do not split into whole {spec.dtype} elements over "
                         f"{world_size} ranks; use a multiple of {unit}")


def check_all_fit(collectives: list[CollectiveSpec], world_size: int) -> None:
    """check_fits of each collective, as a one-line UserError naming its --collective flag."""
    from hpcprof.core.errors import UserError

    for spec in collectives:
        try:
            check_fits(spec, world_size)
        except ValueError as exc:
            raise UserError(f"--collective {spec.text()}: {exc}") from None


def default_specs(kind: str, args: dict[str, Any], world_size: int) -> tuple[list[GemmSpec], list[CollectiveSpec]]:
    """The sizes a workload's ceilings are measured at. seqpar: its two matmuls (m, n, k of
    [S,H]@[H,H/p] and [S,H/p]@[H/p,H]) and its all-gather/reduce-scatter of S*H elements, in its
    precision; any other: GEMM 8192^3 in bfloat16 and tf32, the three collectives at 1 MiB .. 256 MiB
    (x4) in float32."""
    if kind == "seqpar":
        from hpcprof.workloads.args import SeqparArgs

        defaults = SeqparArgs()
        s = int(args.get("sequence_length", defaults.sequence_length))
        h = int(args.get("hidden_dim", defaults.hidden_dim))
        precision = str(args.get("precision", defaults.precision))
        p = max(world_size, 1)
        gemms = [GemmSpec(s, h // p, h, precision), GemmSpec(s, h, h // p, precision)]
        nbytes = s * h * COLLECTIVE_DTYPES[precision]
        return gemms, [CollectiveSpec(op, nbytes, precision) for op in ("all_gather", "reduce_scatter")]
    gemms = [GemmSpec(DEFAULT_GEMM, DEFAULT_GEMM, DEFAULT_GEMM, d) for d in ("bfloat16", "tf32")]
    return gemms, [CollectiveSpec(op, b, "float32") for op in BUS_FACTORS for b in DEFAULT_BYTES]


#: the largest experiment file --sizes-from reads (bytes)
SIZES_FILE = 4 << 20


def sizes_from(path: Path) -> tuple[str, dict[str, Any], int]:
    """(workload kind, workload args, world size) of a run directory (its config.json) or of an
    experiment file (its first point: world size = nodes x ranks_per_node, default 1 x 1)."""
    import yaml

    from hpcprof.core.errors import UserError
    from hpcprof.core.safe_paths import read_regular
    from hpcprof.core.safe_yaml import load_bounded

    flag = "--sizes-from"
    try:   # bounded reads of regular files only: a FIFO or a device is refused, never waited on
        if path.is_dir():
            record = json.loads(read_regular(path / "config.json"))
            experiment, world = record["experiment"], int(record["world_size"])
        else:
            experiment = load_bounded(read_regular(path, SIZES_FILE).decode())
            resources = experiment.get("resources") or {}
            world = int(resources.get("nodes", 1)) * int(resources.get("ranks_per_node") or 1)
        workload = experiment["workload"]
        return str(workload["kind"]), dict(workload.get("args") or {}), world
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as exc:
        raise UserError(f"{flag} {path}: not a run directory (config.json) or an experiment file with "
                        f"workload: ({type(exc).__name__}: {exc}); give a run directory or an experiment YAML") from None
