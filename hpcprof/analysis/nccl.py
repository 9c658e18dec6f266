"""NCCL kernels by their names: the one rule of what is communication and which collective it is,
per name (the standard library only: the analyses apply it once per distinct name: nsys's activity.py
and distributed.py over numpy columns, quick_analyses.py over rows, the Kineto critical path, the
kernel categories' `nccl.<collective>`)."""

from __future__ import annotations

import re

NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_(?P<collective>[A-Za-z0-9]+?)(?:_|\(|$)")


def nccl_name(name: object) -> bool:
    """Whether a kernel of this name communicates: text starting with `nccl` (the nsys recipes'
    rule); as pandas' str.startswith made a mask: False for None, True for another non-text value (NaN)."""
    return name.startswith("nccl") if isinstance(name, str) else name is not None


def collective_kind(name: object) -> str | None:
    """The collective an NCCL kernel name names (`AllReduce` of `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`), else None."""
    found = NCCL_KERNEL.match(name) if isinstance(name, str) else None
    return found.group(1) if found else None


def collective_of(short: object, name: object) -> str:
    """The collective of an NCCL kernel: by its short name, else its full name, else `other`."""
    return collective_kind(short) or collective_kind(name) or "other"
