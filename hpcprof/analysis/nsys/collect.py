"""Collector for nsys profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis import CollectContext


def collect_nsys(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """Analyse the run's nsys profiles; returns named tables."""
    raise NotImplementedError
