"""Hardware peaks for `% of peak`: a table of known GPUs (dense, i.e. without structured sparsity,
figures from NVIDIA's datasheets, each cited), which a site file's `peaks:` overrides.

Matmul peaks are per precision: `float32` is the CUDA-core FP32 peak (what a float32 matmul reaches
with TF32 off, PyTorch's default for matmul), `tf32`, `bfloat16`, `float16` the Tensor-Core peaks.
Link figures are per direction, the unit of NCCL's bus bandwidth: NVLink's total bidirectional
figure halved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcprof.run.record import SiteRecord

A100_SHEET = ("NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): "
              "FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense; NVLink 600 GB/s")
H100_SHEET = ("NVIDIA H100 Tensor Core GPU datasheet (h100-datasheet-2430615): SXM FP32 67, TF32 494.7, "
              "BF16/FP16 989.4 TFLOPS dense (half the sparse 989/1,979); NVLink 900 GB/s")
H100_PCIE_SHEET = ("NVIDIA H100 Tensor Core GPU datasheet (h100-datasheet-2430615): PCIe FP32 51, TF32 378, "
                   "BF16/FP16 756 TFLOPS dense (half the sparse 756/1,513); NVLink bridge 600 GB/s")
H200_SHEET = ("NVIDIA H200 Tensor Core GPU datasheet (hpc-datasheet-sc23-h200): SXM FP32 67, TF32 494.7, "
              "BF16/FP16 989.5 TFLOPS dense (half the sparse 989/1,979); NVLink 900 GB/s")


@dataclass(frozen=True)
class Peaks:
    """One device's peaks: matmul TFLOP/s by precision, link GB/s per direction, and the source."""

    gpu: str
    tflops: dict[str, float] = field(default_factory=dict)
    nvlink_GBps: float | None = None
    network_GBps: float | None = None
    source: str = ""


#: known GPUs: (pattern on torch.cuda.get_device_name(), peaks); the first match wins
KNOWN: list[tuple[str, Peaks]] = [
    (r"H200", Peaks("H200 SXM", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.5, "float16": 989.5},
                    450.0, None, H200_SHEET)),
    (r"H100.*PCIe", Peaks("H100 PCIe", {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0, "float16": 756.0},
                          300.0, None, H100_PCIE_SHEET)),
    (r"H100", Peaks("H100 SXM", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4},
                    450.0, None, H100_SHEET)),
    (r"A100.*80", Peaks("A100 80GB", {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0},
                        300.0, None, A100_SHEET)),
    (r"A100", Peaks("A100 40GB", {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0},
                    300.0, None, A100_SHEET)),
]


def known_peaks(device_name: str) -> Peaks | None:
    """The table's peaks of the GPU called `device_name` (as torch names it), None when unknown."""
    return next((peaks for pattern, peaks in KNOWN if re.search(pattern, device_name)), None)


def device_peaks(device_name: str, site: SiteRecord) -> Peaks | None:
    """The peaks for a run: the site's `peaks:` figures over the table's (a figure the site does not
    give comes from the table); None when neither knows the device."""
    table = known_peaks(device_name)
    override = site.peaks
    if override is None:
        return table
    base = table or Peaks(device_name)
    source = f"site {site.name}: {override.source or 'peaks: in the site file'}"
    return Peaks(base.gpu, {**base.tflops, **override.tflops},
                 override.nvlink_GBps or base.nvlink_GBps, override.network_GBps or base.network_GBps,
                 source + (f"; other figures: {base.source}" if table else ""))


def matmul_precision(args: dict[str, Any]) -> str:
    """The precision whose matmul peak applies to a workload's args (`precision`, `tf32`)."""
    precision = str(args.get("precision", "float32"))
    return "tf32" if precision == "float32" and args.get("tf32") else precision
