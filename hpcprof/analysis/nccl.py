"""NCCL kernels by their names: the one rule of what is communication and which collective it is,
per name (the standard library only: the analyses apply it once per distinct name: nsys's activity.py
and distributed.py over numpy columns, the Kineto critical path, the kernel categories'
`nccl.<collective>`)."""

from __future__ import annotations

import re

#: the rule, as the regular expression the kernel categories search with: `ncclKernel_` or
#: `ncclDevKernel_`, then the collective (ASCII letters and digits) ended by `_`, `(` or the name's end
NCCL_KERNEL = r"^nccl(?:Dev)?Kernel_(?P<collective>[A-Za-z0-9]+?)(?:_|\(|$)"
_NCCL_KERNEL = re.compile(NCCL_KERNEL)


def nccl_name(name: object) -> bool:
    """Whether a kernel of this name communicates: text starting with `nccl` (the nsys recipes'
    rule); as pandas' str.startswith made a mask: False for None, True for another non-text value (NaN)."""
    return name.startswith("nccl") if isinstance(name, str) else name is not None


def collective_kind(name: object) -> str | None:
    """The collective an NCCL kernel name names (`AllReduce` of `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`), else None."""
    match = _NCCL_KERNEL.match(name) if isinstance(name, str) else None
    return match.group("collective") if match else None


def collective_of(short: object, name: object) -> str:
    """The collective of an NCCL kernel: by its short name, else its full name, else `other`."""
    return collective_kind(short) or collective_kind(name) or "other"
