"""nsys's part of hpcprof's Python API (hpcprof.api names it): the `nsys stats` reports of an export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd


def nsys_reports() -> list[str]:
    """The `nsys stats` reports hpcprof computes (names as nsys spells them)."""
    from hpcprof.tools.nsys.stats.stats import REPORTS

    return sorted(REPORTS)


def nsys_report(export: str | Path, name: str) -> pd.DataFrame:
    """One `nsys stats` report (e.g. cuda_gpu_kern_sum) of an nsys SQLite export, as nsys
    computes it (`hpcprof nsys stats`)."""
    from hpcprof.tools.nsys.stats.db import Export
    from hpcprof.tools.nsys.stats.stats import REPORTS, run_report

    if name not in REPORTS:
        raise UserError(f"nsys report {name!r}: unknown; known: {', '.join(nsys_reports())}")
    return run_report(Export(Path(export)), name)
