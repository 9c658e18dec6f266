"""trace_speed.py's speed goal on one GPU-machine host: scan_split's helpers with batch_columns before (pandas'
factorize, .str.contains and .isin: the helpers touched pandas' machinery and so copied its pages) and
after (hpcprof's _distinct and _codes, no pandas), alternated, each the 2 x 72 MB case's load + five analyses in a
process of its own (3 helpers per file where the cores allow, as landed); HTA 0.5.0 once per round.
Prints each run's time and the peak PSS of its process tree against HTA's.

    python3 benchmarks/gpu/trace_factorize_ab.py ROUNDS HTA_PYTHON

(HTA_PYTHON as benchmarks/gpu/trace_speed_gpu.sh makes it there: carry .gpu/trace.)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import trace_speed  # noqa: E402  (its drivers, fixtures and sampling)

#: batch_columns as it was before (hpcprof/tools/torch/analysis/load.py at 073b77a), run in load's namespace
BEFORE = '''
def batch_columns(events: list[Event]) -> BatchColumns | None:
    """The usable events of one batch (GPU events, CPU events with a correlation id, ProfilerStep
    annotations, sync events) as BatchColumns; None for no events."""
    if not events:
        return None
    first = events[0]
    first_ts = (float(first.ts) if first.ts is not None and first.cat is not None
                and first.dur is not None and first.dur == first.dur else math.nan)
    ts_is_float = bool(set(map(type, [e.ts for e in events])) - {int})
    no_args = _Args()
    args = [e.args or no_args for e in events]
    stream = _int_column([a.stream for a in args])
    corr = _int_column([a.correlation for a in args])
    del args
    name_codes, uniques = pd.factorize(np.array([e.name for e in events], dtype=object))
    names = _str_index(uniques)
    step_name = np.append(names.str.contains("ProfilerStep", regex=False), False)[name_codes]
    sync_name = np.append(names.isin(SYNC_NAMES), False)[name_codes]  # code -1 (no name): False
    idx = np.flatnonzero((stream != -1) | (corr != -1) | step_name | sync_name)
    chosen = [events[i] for i in idx.tolist()]
    cat_codes, cats = pd.factorize(np.array([e.cat for e in chosen], dtype=object))
    return BatchColumns(len(events), first_ts, ts_is_float, uniques, cats,
                        np.array([e.ts for e in chosen], dtype=np.float64),
                        np.array([e.dur for e in chosen], dtype=np.float64),
                        name_codes[idx], cat_codes, stream[idx], corr[idx])
'''
BEFORE_DRIVER = ("import hpcprof.tools.torch.analysis.load as _load\n"
                 f"exec({BEFORE!r}, _load.__dict__)\n"
                 "_load.TraceColumns.part = staticmethod(_load.batch_columns)\n")


def main() -> None:
    rounds, hta_python = int(sys.argv[1]), sys.argv[2]
    work = Path("/tmp/tr")
    traces = trace_speed.scaled(trace_speed.FIXTURES / "h200_ddp_gpt2", 72, work)
    for r in range(rounds):
        hta = trace_speed.run(hta_python, trace_speed.HTA_DRIVER, traces, work / "ab_hta.json", 1)
        hta_s, hta_kb = hta["load_s"] + hta["analyses_s"], hta["tree_kb"]
        print(f"# round {r + 1}: HTA 0.5.0 {hta_s:.2f} s, {hta_kb / 1024:.0f} MiB (all processes)", flush=True)
        for _ in range(3):
            for name, prefix in (("before", BEFORE_DRIVER), ("after", "")):
                out = trace_speed.run(sys.executable, prefix + trace_speed.HPCPROF_DRIVER, traces,
                                      work / f"ab_{name}.json", 1)
                total = out["load_s"] + out["analyses_s"]
                print(f"  {name:6s} total {total:.2f} s ({hta_s / total:4.1f}x HTA), all processes "
                      f"{out['tree_kb'] / 1024:4.0f} MiB ({out['tree_kb'] / hta_kb:.2f} of HTA)", flush=True)


if __name__ == "__main__":
    main()
