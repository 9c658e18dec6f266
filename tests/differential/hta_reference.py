"""HTA 0.5.0's TraceAnalysis with its traces parsed in this process.

`TraceAnalysis(trace_dir=...)` always parses through a `fork` pool; forked from a test process that
already runs threads (pyarrow, torch, earlier tests' pools) a child can inherit a held lock and
never finish (CI hung there 600 s). The analyses are the same; only where the parsing runs differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def hta_trace_analysis(trace_dir: Path) -> Any:
    """HTA's TraceAnalysis on `trace_dir`, parsed serially (`load_traces(use_multiprocessing=False)`)."""
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis.__new__(TraceAnalysis)
    analysis.t = Trace(trace_dir=str(trace_dir))
    analysis.t.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    assert analysis.t.is_parsed
    return analysis
