"""What an nsys SQLite export holds (table names, NVTX event types), how nsys names what it holds
in its reports (memcpy labels, API names, NVTX ranges: one rule each) and the check that a file is
a complete SQLite database: the standard library only, shared by both report engines."""

from __future__ import annotations

import os

TYPE_CHECKING = False          # typing's constant without importing typing
if TYPE_CHECKING:
    from pathlib import Path


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
STRINGS = "StringIds"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)
UM_CPU = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"
UM_GPU = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"

NVTX_PUSHPOP = (59, 70)       # NvtxPushPopRange, NVTX-t variant
NVTX_STARTEND = (60, 71)      # NvtxStartEndRange, NVTX-t variant
NVTX_DOMAIN_CREATE = 75

SQLITE_MAGIC = b"SQLite format 3\x00"

#: report layouts: nsys 2022.4's (old report names) and nsys 2024-2025's (current names)
OLD, NEW = "2022.4", "2025.3"

# nsys 2022.4's hard-coded memcpy labels (copyKind -> name); newer nsys uses ENUM_CUDA_MEMCPY_OPER.label
OLD_MEMCPY_LABELS = {
    0: "[CUDA memcpy Unknown]", 1: "[CUDA memcpy HtoD]", 2: "[CUDA memcpy DtoH]",
    3: "[CUDA memcpy HtoA]", 4: "[CUDA memcpy AtoH]", 5: "[CUDA memcpy AtoA]",
    6: "[CUDA memcpy AtoD]", 7: "[CUDA memcpy DtoA]", 8: "[CUDA memcpy DtoD]",
    9: "[CUDA memcpy HtoH]", 10: "[CUDA memcpy PtoP]",
    11: "[CUDA Unified Memory memcpy HtoD]", 12: "[CUDA Unified Memory memcpy DtoH]",
    13: "[CUDA Unified Memory memcpy DtoD]",
}
OLD_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                 5: "Device Static", 6: "Managed Static", 7: "Unknown"}
MEMSET_LABEL = "[CUDA memset]"
OSRT_EVENT_CLASS = 27


def memcpy_label(operation: str) -> str:
    """The report label of an ENUM_CUDA_MEMCPY_OPER label (nsys 2024+): `[CUDA memcpy Host-to-Device]`."""
    return f"[CUDA memcpy {operation}]"


def clean_api_name(name: str | None) -> str | None:
    """An API name without its `_vNNNN` suffix (exactly 4 characters after `_v`), as nsys's API reports show it."""
    return name[:-6] if isinstance(name, str) and len(name) >= 6 and name[-6:-4] == "_v" else name


def nvtx_name(domain: str | None, label: str | None, layout: str) -> str | None:
    """An NVTX range's name in the reports of `layout`: `domain:label`, `domain` being the name of the
    range's domain (None where its process created none). nsys 2022.4 shows a range without a domain
    by its label alone; newer nsys always writes `domain:label`, empty parts as "" (`:label`)."""
    if layout == OLD:
        return label if domain is None else f"{domain}:{label}"
    return f"{domain or ''}:{label or ''}"


def nvtx_domain_name(inline: str | None, label: str | None, layout: str) -> str | None:
    """The name of an NVTX domain (its eventType 75 row): nsys 2022.4 takes the row's inline text,
    newer nsys its label (the StringIds text of textId, else the inline text)."""
    return inline if layout == OLD else label


class MissingData(Exception):
    """The export lacks the data a report needs (nsys prints SKIPPED for these)."""


class NsysInputError(Exception):
    """An export that cannot be analysed (not SQLite, truncated, no GPU data, ...)."""


def check_sqlite_file(path: str | Path) -> None:
    """Raise NsysInputError unless `path` looks like a complete SQLite database."""
    if not os.path.isfile(path):     # a FIFO or a device (/dev/zero) is refused, not read
        raise NsysInputError(f"{path}: " + ("not a regular file; hpcprof reads regular files only"
                                            if os.path.exists(path) else "no such file"))
    size = os.stat(path).st_size
    with open(path, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise NsysInputError(f"{path}: not an SQLite database (export .nsys-rep files with "
                             "`nsys export -t sqlite` first)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and size < pages * page_size:
        raise NsysInputError(f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes)")


NO_STRINGS = "the StringIds table is missing, names cannot be resolved"
NO_GPU_ACTIVITY = ("no GPU activity (no CUDA kernels, memcpys or memsets in the export; was the run "
                   "traced with -t cuda?)")
