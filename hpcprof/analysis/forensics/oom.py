"""A CUDA out-of-memory error in numbers: the sizes PyTorch's caching allocator writes into its
`OutOfMemoryError` ("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of
139.81 GiB of which 1.19 GiB is free. ... Of the allocated memory 130.50 GiB is allocated by
PyTorch, and 4.01 GiB is reserved by PyTorch but unallocated. ..."), each written by its
`format_size` (bytes, KiB, MiB, GiB: two decimals).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hpcprof.core.errors import UserError

#: the largest OOM snapshot read for the sentence (the start-up hook's, hpcprof/inject/_hpcprof_memory.py)
MAX_SNAPSHOT_BYTES = 256 << 20

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


def holders_text(snapshot: Path, device: int | None) -> str:
    """What held the memory when the rank ran out, from the snapshot the start-up hook dumped then:
    `128.0 GiB were held by `train.py:6 forward` (64 blocks allocated during the history and still
    held)`; "" where there is no snapshot, it cannot be read or its blocks have no stacks."""
    from hpcprof.analysis.memory import UNKNOWN, analyse, read_snapshot

    try:
        devices = analyse(read_snapshot(snapshot, max_bytes=MAX_SNAPSHOT_BYTES))
    except (OSError, UserError, ValueError):
        return ""
    found = next((d for d in devices if d.device == device), max(devices, key=lambda d: d.end, default=None))
    if found is None or not found.at_end or found.at_end[0].site == UNKNOWN:
        return ""
    top = found.at_end[0]
    text = f"{gib(top.bytes)} were held by `{top.site}`"
    grown = next((h for h in found.growing if h.site == top.site), None)
    if grown is not None and grown.blocks > 1:
        text += f" ({grown.blocks:,} blocks allocated during the history and still held)"
    return text
