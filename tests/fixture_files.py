"""The real profiler fixtures kept in the repository (tests/fixtures, provenance in SOURCES.md).

Large files are stored xz-compressed (`name.xz`); `materialize` writes the tree with every `.xz`
file unpacked, so tests and benchmarks see the original names and bytes.
"""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

STORED = Path(__file__).resolve().parent / "fixtures"


def materialize(dest: Path, source: Path = STORED) -> Path:
    """Copy `source` into `dest`, unpacking `*.xz`; returns `dest`. Idempotent."""
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(source)
        target = dest / (rel.with_suffix("") if path.suffix == ".xz" else rel)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        if path.suffix == ".xz":
            with lzma.open(path) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        else:
            shutil.copyfile(path, tmp)
        tmp.replace(target)
    return dest
