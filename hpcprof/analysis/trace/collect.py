"""Collector for trace profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

import pandas as pd

from hpcprof.analysis import CollectContext


def collect_traces(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """Analyse the run's trace profiles; returns named tables."""
    raise NotImplementedError
