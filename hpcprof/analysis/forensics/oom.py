"""A CUDA out-of-memory error in numbers: the sizes PyTorch's caching allocator writes into its
`OutOfMemoryError` ("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of
139.81 GiB of which 1.19 GiB is free. ... Of the allocated memory 130.50 GiB is allocated by
PyTorch, and 4.01 GiB is reserved by PyTorch but unallocated. ..."), each written by its
`format_size` (bytes, KiB, MiB, GiB: two decimals).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB|TiB|PiB)"
UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
_OOM = re.compile(r"\bCUDA out of memory\. Tried to allocate " + _SIZE)
_CAPACITY = re.compile(r"GPU (\d+) has a total capacity of " + _SIZE + " of which " + _SIZE + " is free")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + " is allocated by PyTorch")
_RESERVED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")


def size_bytes(number: str, unit: str) -> int:
    """`4.00`, `GiB` -> bytes (as exact as the message's two decimals)."""
    return round(float(number) * UNITS[unit])


@dataclass(frozen=True)
class OutOfMemory:
    """What one CUDA out-of-memory error says, in bytes; None where the message does not say it."""

    asking_text: str               # the request as PyTorch wrote it: `4.00 GiB`
    asking: int
    device: int | None = None
    capacity: int | None = None
    free: int | None = None
    allocated: int | None = None   # allocated by PyTorch
    reserved_free: int | None = None   # reserved by PyTorch but unallocated

    def text(self) -> str:
        """`asking 4.00 GiB; 130.5 of 139.8 GiB allocated, 4.0 GiB reserved but free`."""
        parts = [f"asking {self.asking_text}"]
        if self.allocated is not None:
            of = f" of {gib(self.capacity)}" if self.capacity is not None else ""
            said = f"{self.allocated / (1 << 30):,.1f}{of}" if of else gib(self.allocated)
            parts.append(f"{said} allocated" + (f", {gib(self.reserved_free)} reserved but free"
                                                if self.reserved_free is not None else ""))
        return "; ".join(parts)


def gib(value: int) -> str:
    """Bytes as GiB with one decimal: `139.8 GiB`."""
    return f"{value / (1 << 30):,.1f} GiB"


def parse_oom(message: str) -> OutOfMemory | None:
    """The sizes of a CUDA out-of-memory message (PyTorch's caching allocator's), None for any other error."""
    found = _OOM.search(message)
    if found is None:
        return None
    capacity, allocated, reserved = (pattern.search(message) for pattern in (_CAPACITY, _ALLOCATED, _RESERVED))

    def size(match: re.Match[str] | None, at: int) -> int | None:
        return size_bytes(match[at], match[at + 1]) if match else None

    return OutOfMemory(f"{found[1]} {found[2]}", size_bytes(found[1], found[2]), int(capacity[1]) if capacity else None,
                       size(capacity, 2), size(capacity, 4), size(allocated, 1), size(reserved, 1))
