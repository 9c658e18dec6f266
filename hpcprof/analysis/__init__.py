"""Analyses of profiler output, one package per tool, each a function from data to DataFrames.

`collect` hands each run's profiles to its tool's `ToolCollector` (hpcprof.analysis.collector),
which the tool's entry in the profiler table (hpcprof.profilers) names: the collector picks the files
to map (`inputs`), analyses the rank files in parallel workers, several a task (`analyse_batch`:
each file on its own, or several in one pass where the analyses are vectorised over ranks), then
reduces across ranks over the concatenated per-rank tables (`reduce`). `collect` writes the tables
to `results/<tool>_<name>.parquet`. Analyses never write into the user's profile files.
"""
